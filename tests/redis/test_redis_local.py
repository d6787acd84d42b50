"""What the Redis store answers from this process's own knowledge, and what it still asks.

A read asks Redis only for what this process does not hold (entries after the ones it appended
or read, and the snapshot only when it differs), and nothing when it holds the whole answer.
Waits ask nothing once the task's channel subscription is confirmed. These tests pin both
halves: the answers are the same as before (another connection's appends, snapshots and
evictions are seen at once), and the round trips saved are really saved (counted with Redis'
own ``INFO commandstats``, not timed).
"""

from __future__ import annotations

from typing import Any

import anyio
import coredis
import pytest

from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.types import Artifact, Part, Task, TaskArtifactUpdateEvent, TaskState
from scoped_a2a.runtime.tail import tail
from scoped_a2a.store.base import LogPage
from scoped_a2a.store.redis import open_redis_store
from scoped_a2a.store.redis.local import LocalView

from .conftest import RedisServer
from .test_redis_store import new_task, status

pytestmark = pytest.mark.anyio


def chunk(task: Task, text: str, *, append: bool = True) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id, append=append,
                                   artifact=Artifact(artifact_id="a", parts=[Part(text=text)]))


async def commandstats(url: str) -> dict[str, int]:
    client: coredis.Redis[bytes] = coredis.Redis.from_url(url)
    async with client:
        stats: dict[str, Any] = await client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()
            if k.startswith("cmdstat_")}


async def test_a_read_sees_another_connections_append_and_snapshot_at_once(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        task = new_task()
        await a.create(task)
        await a.append(task.id, status(task, TaskState.WORKING))
        await a.append(task.id, chunk(task, "one ", append=False))
        assert [e.position for e in (await a.read(task.id, 0)).entries] == [1, 2]  # held now
        await b.append(task.id, chunk(task, "two"))  # A has not necessarily heard of it yet
        page = await a.read(task.id, 0)
        assert [e.position for e in page.entries] == [1, 2, 3]
        assert (page.next, page.has_more) == (3, False)
        assert page.task.artifacts is not None
        assert [p.text for p in page.task.artifacts[0].parts] == ["one ", "two"]
        # The bounds apply across what is held and what is fetched.
        page = await a.read(task.id, 0, max_events=2)
        assert ([e.position for e in page.entries], page.has_more) == ([1, 2], True)
        page = await a.read(task.id, 1, max_bytes=1)
        assert ([e.position for e in page.entries], page.has_more) == ([2], True)


async def test_a_task_evicted_elsewhere_is_not_found_here_at_once(
    redis_server: RedisServer,
) -> None:
    async with (open_redis_store(redis_server.url, max_ended_tasks=1) as a,
                open_redis_store(redis_server.url, max_ended_tasks=1) as b):
        first = new_task()
        await a.create(first)
        await a.append(first.id, status(first, TaskState.COMPLETED))
        assert (await a.read(first.id, 0)).entries  # held here
        second = new_task()
        await b.create(second)
        await b.append(second.id, status(second, TaskState.COMPLETED))  # evicts the first
        with pytest.raises(TaskNotFound):
            await a.read(first.id, 0)
        with pytest.raises(TaskNotFound):
            await a.get(first.id)


async def test_a_stream_followed_where_it_is_written_costs_one_script_per_event_or_so(
    redis_server: RedisServer,
) -> None:
    events = 40
    async with open_redis_store(redis_server.url) as store:
        with anyio.fail_after(10):
            await store.conn.listening.wait()
        task = new_task()
        got: list[int] = []

        async def on_page(page: LogPage) -> None:
            got.extend(e.position for e in page.entries)
            await anyio.sleep(0)

        async def writer() -> None:
            await store.append(task.id, status(task, TaskState.WORKING))
            for i in range(events):
                await store.append(task.id, chunk(task, f"{i} ", append=i > 0))
                await anyio.sleep(0)  # let the reader run between appends: a wake-up each
            await store.append(task.id, status(task, TaskState.COMPLETED))

        before = await commandstats(redis_server.url)
        await store.create(task)
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            with anyio.fail_after(20):
                await tail(store, task.id, 0, on_page)
        after = await commandstats(redis_server.url)
        assert got == list(range(1, events + 3))
        calls = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        # (A script's first call is refused with NOSCRIPT, then loaded and called again.)
        scripts = calls.get("evalsha", 0) + calls.get("eval", 0) - calls.get("script|load", 0)
        appends = events + 2
        # The create, at most one script per append (they share batches: the run does not
        # wait for its artifacts' round trips), two reads at most (the first, and one more
        # before the reader's subscription is confirmed: then it reads what this process
        # appended) and one position check (the first wait subscribes; then waits are free).
        assert calls.get("hget", 0) <= 1, calls
        assert scripts <= 1 + appends + 2, calls
        assert calls.get("xrange", 0) <= 2, calls
        # The snapshot travelled with the reads only when this process did not hold it: the
        # reads return it empty (checked through the local view, which decoded it once).
        assert store.local.known_last(task.id) == appends


async def test_a_wait_returns_for_an_append_and_not_for_the_echo_of_one_already_read(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        a.poll_interval = 60.0
        with anyio.fail_after(10):
            await a.conn.listening.wait()
        task = new_task()
        await a.create(task)
        await a.append(task.id, status(task, TaskState.WORKING))
        woke = anyio.Event()

        async def waiter() -> None:
            await a.wait(task.id, 1)
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            with anyio.fail_after(10):  # the channel's message for position 1 arrives...
                while a.local.known_last(task.id) != 1 or a.conn.waiters._events.get(
                        task.id) is None:
                    await anyio.sleep(0.01)
            a.conn.waiters.wake(task.id)  # ...and an echo of it wakes the waiter: it sleeps on
            await anyio.sleep(0.1)
            assert not woke.is_set()
            await b.append(task.id, status(task, TaskState.COMPLETED))
            with anyio.fail_after(10):
                await woke.wait()


def test_positions_are_trusted_only_after_a_confirmed_subscription() -> None:
    confirmed: dict[str, int] = {}
    view = LocalView(confirmed.get)
    view.saw("t", 3, tick=1)
    assert view.known_last("t") is None  # no subscription: ask Redis
    confirmed["t"] = 5
    view.saw("t", 4, tick=5)
    assert view.known_last("t") is None  # sent before the confirmation: ask Redis
    view.saw("t", 4, tick=6)
    assert view.known_last("t") == 4
    view.heard("t", 7)
    assert view.known_last("t") == 7
    confirmed["t"] = 9  # resubscribed (a new listener connection): messages may be lost
    assert view.known_last("t") is None
    del confirmed["t"]
    view.saw("t", 8, tick=10)
    assert view.known_last("t") is None
