"""The Redis task store in this process, against a real redis-server, on asyncio and trio.

The same events folded by the in-memory store and by the Redis store give the same positions,
snapshots and pages; terminal states never change even when two connections race; retention is
bounded; a waiter on one connection wakes on another's append; a send while Redis is down fails
with -32000 and the server recovers by itself when Redis returns.
"""

from __future__ import annotations

import uuid

import anyio
import httpx
import msgspec
import pytest

from scoped_a2a import A2AApp, MemoryTaskStore
from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.trajectory import TrajectoryEvent
from scoped_a2a.protocol.types import (
    Artifact,
    ListTasksRequest,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from scoped_a2a.store.base import TaskEnded
from scoped_a2a.store.redis import open_redis_store

from ..helpers import rpc, served, text_message
from .agents import probe_agent
from .conftest import RedisServer

pytestmark = pytest.mark.anyio
_encode = msgspec.json.encode


def new_task(context_id: str = "ctx") -> Task:
    tid = uuid.uuid4().hex
    msg = Message(message_id=uuid.uuid4().hex, role=Role.USER, parts=[Part(text="hi")],
                  task_id=tid, context_id=context_id)
    return Task(id=tid, context_id=context_id, history=[msg],
                status=TaskStatus(state=TaskState.SUBMITTED, timestamp="2026-01-01T00:00:00.000Z"))


def status(task: Task, state: TaskState, text: str | None = None) -> TaskStatusUpdateEvent:
    msg = None
    if text is not None:
        msg = Message(message_id=uuid.uuid4().hex, role=Role.AGENT, parts=[Part(text=text)],
                      task_id=task.id, context_id=task.context_id)
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id,
                                 status=TaskStatus(state=state, message=msg))


def chunk(task: Task, text: str, *, append: bool) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=task.id, context_id=task.context_id, append=append,
        artifact=Artifact(artifact_id="a1", parts=[Part(text=text)]),
    )


def tick(task: Task, i: int) -> TrajectoryEvent:
    return TrajectoryEvent(task_id=task.id, context_id=task.context_id, data={"i": i})


async def test_positions_snapshot_and_pages_match_the_memory_store(
    redis_server: RedisServer,
) -> None:
    task = new_task()
    events = [status(task, TaskState.WORKING, "working"), chunk(task, "one ", append=False),
              tick(task, 0), chunk(task, "two", append=True), tick(task, 1),
              status(task, TaskState.COMPLETED, "done")]
    memory = MemoryTaskStore()
    async with open_redis_store(redis_server.url) as store:
        await store.create(msgspec.structs.replace(task))
        await memory.create(msgspec.convert(msgspec.to_builtins(task), Task))
        for event in events:
            assert await store.append(task.id, event) == await memory.append(task.id, event)
        (got, pos), (want, want_pos) = await store.get(task.id), await memory.get(task.id)
        assert pos == want_pos == len(events)
        assert _encode(got) == _encode(want)
        assert "".join(p.text or "" for p in got.artifacts[0].parts) == "one two"  # type: ignore[index]

        for after, kwargs in [(0, {}), (2, {}), (0, {"max_events": 2}), (0, {"max_bytes": 1}),
                              (len(events), {})]:
            page, mem_page = (await store.read(task.id, after, **kwargs),
                              await memory.read(task.id, after, **kwargs))
            assert [(e.position, e.encoded) for e in page.entries] == [
                (e.position, e.encoded) for e in mem_page.entries]
            assert (page.next, page.has_more) == (mem_page.next, mem_page.has_more)
        assert [e.position for e in (await store.read(task.id, 0, max_bytes=1)).entries] == [1]

        # Terminal states never change: the event is refused and nothing moves.
        with pytest.raises(TaskEnded):
            await store.append(task.id, status(task, TaskState.WORKING))
        assert (await store.get(task.id))[1] == len(events)
        with pytest.raises(TaskNotFound):
            await store.get("no-such-task")


async def test_racing_terminal_writes_from_two_connections_end_each_task_once(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        tasks = [new_task() for _ in range(20)]
        for task in tasks:
            await a.create(task)
            await a.append(task.id, status(task, TaskState.WORKING))  # A caches its snapshot
        outcomes: dict[str, list[str]] = {t.id: [] for t in tasks}

        async def end(store: object, task: Task, state: TaskState) -> None:
            try:
                await store.append(task.id, status(task, state, state.name))  # type: ignore[attr-defined]
                outcomes[task.id].append(state.name)
            except TaskEnded:
                pass

        async with anyio.create_task_group() as tg:
            for task in tasks:
                tg.start_soon(end, a, task, TaskState.COMPLETED)
                tg.start_soon(end, b, task, TaskState.CANCELED)
        for task in tasks:
            assert len(outcomes[task.id]) == 1, outcomes[task.id]
            got, pos = await b.get(task.id)
            assert got.status.state.name == outcomes[task.id][0]
            assert pos == 2
            states = [e.event.status.state for e in (await a.read(task.id, 0)).entries
                      if isinstance(e.event, TaskStatusUpdateEvent)]
            assert sum(s.terminal for s in states) == 1


async def test_retention_trims_logs_and_evicts_and_expires_ended_tasks(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url, max_events_per_task=3, max_ended_tasks=2,
                                ended_ttl=0.5) as store:
        running = new_task()
        await store.create(running)
        for i in range(6):
            await store.append(running.id, tick(running, i))
        page = await store.read(running.id, 0)
        assert [e.position for e in page.entries] == [4, 5, 6]
        assert page.first_retained == 4  # readers learn events were dropped
        ended = [new_task() for _ in range(3)]
        for task in ended:
            await store.create(task)
            await store.append(task.id, status(task, TaskState.COMPLETED))
        with pytest.raises(TaskNotFound):
            await store.get(ended[0].id)  # oldest-ended evicted beyond max_ended_tasks
        listed = await store.list_tasks(ListTasksRequest())
        assert {t.id for t in listed.tasks} == {running.id, ended[1].id, ended[2].id}
        await anyio.sleep(0.8)
        for task in ended[1:]:
            with pytest.raises(TaskNotFound):
                await store.get(task.id)  # expired after ended_ttl
        assert (await store.get(running.id))[1] == 6  # running tasks never expire
        listed = await store.list_tasks(ListTasksRequest())
        assert [t.id for t in listed.tasks] == [running.id]


async def test_a_waiter_wakes_on_an_append_made_through_another_connection(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        b.poll_interval = 60.0  # only the notification can wake it in time
        task = new_task()
        await a.create(task)
        with anyio.fail_after(10):
            await b.conn.listening.wait()
        woke = anyio.Event()

        async def waiter() -> None:
            await b.wait(task.id, 0)
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.sleep(0.2)
            assert not woke.is_set()
            await a.append(task.id, tick(task, 0))
            with anyio.fail_after(5):
                await woke.wait()
        assert [e.position for e in (await b.read(task.id, 0)).entries] == [1]


async def test_push_configs_are_stored_with_the_task(redis_server: RedisServer) -> None:
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        task = new_task()
        await a.create(task)
        cfg = TaskPushNotificationConfig(url="http://127.0.0.1:1/hook", id="p1", task_id=task.id,
                                         token="tok")
        await a.set_push_config(task.id, cfg)
        assert await b.push_configs(task.id) == [cfg]
        assert await b.delete_push_config(task.id, "p1") is True
        assert await a.delete_push_config(task.id, "p1") is False
        assert await a.push_configs(task.id) == []
        with pytest.raises(TaskNotFound):
            await a.set_push_config("no-such-task", cfg)


async def test_list_tasks_pages_newest_first_and_filters(redis_server: RedisServer) -> None:
    async with open_redis_store(redis_server.url) as store:
        tasks = [new_task("even" if i % 2 == 0 else "odd") for i in range(5)]
        for task in tasks:
            await store.create(task)
        seen: list[str] = []
        token = ""
        while True:
            page = await store.list_tasks(ListTasksRequest(page_size=2, page_token=token))
            assert page.total_size == 5
            seen += [t.id for t in page.tasks]
            token = page.next_page_token
            if not token:
                break
        assert seen == [t.id for t in reversed(tasks)]
        even = await store.list_tasks(ListTasksRequest(context_id="even"))
        assert [t.id for t in even.tasks] == [tasks[4].id, tasks[2].id, tasks[0].id]


async def test_redis_down_sends_fail_clearly_and_the_server_recovers(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url) as store:
        app = A2AApp(probe_agent, store=store)
        async with served(app) as url, httpx.AsyncClient(timeout=30) as client:
            done = await rpc(client, url, "SendMessage", {"message": text_message("hello")})
            task_id = done["result"]["task"]["id"]
            assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

            redis_server.kill()
            for params in ({"message": text_message("lost?")},
                           {"message": text_message("lost?"),
                            "configuration": {"returnImmediately": True}}):
                failed = await rpc(client, url, "SendMessage", params)
                assert failed["error"]["code"] == -32000
                assert "unreachable" in failed["error"]["message"]
            failed = await rpc(client, url, "GetTask", {"id": task_id})
            assert failed["error"]["code"] == -32000

            redis_server.start()  # from its append-only file
            got = await rpc(client, url, "GetTask", {"id": task_id})
            assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
            again = await rpc(client, url, "SendMessage", {"message": text_message("back")})
            assert again["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            listed = await rpc(client, url, "ListTasks", {})
            assert listed["result"]["totalSize"] == 2  # nothing accepted that is not stored


async def test_a_follower_elsewhere_wakes_while_the_writers_own_subscription_is_gone(
    redis_server: RedisServer,
) -> None:
    """The writer's listener believes itself subscribed to a task's channel, but Redis dropped
    that subscription (a pub/sub connection lost unnoticed, simulated by unsubscribing behind the
    listener's back): another process's follower still hears the append at once, not at its
    next poll (a batch announced only when it counted a listener besides the writer, and then
    counted none)."""
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        b.poll_interval = 60.0  # only the announcement can wake it in time
        task = new_task()
        await a.create(task)
        with anyio.fail_after(10):
            await a.conn.listening.wait()
            await b.conn.listening.wait()
            await a.conn.watch(task.id)
        assert a.conn.confirmed_at(task.id) is not None
        woke = anyio.Event()

        async def waiter() -> None:
            await b.wait(task.id, 0)
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            with anyio.fail_after(10):
                while b.conn.confirmed_at(task.id) is None:
                    await anyio.sleep(0.01)
            pubsub = a.conn._pubsub
            assert pubsub is not None
            await pubsub.unsubscribe(a.keys.appended(task.id))  # Redis forgets; A's store not
            assert a.conn.confirmed_at(task.id) is not None
            await a.append(task.id, tick(task, 0))
            with anyio.fail_after(5):
                await woke.wait()
        assert [e.position for e in (await b.read(task.id, 0)).entries] == [1]
