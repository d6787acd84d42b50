"""Regression tests for bugs found in review: each one names the scenario it guards."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, A2AClient, RunContext
from scoped_a2a.client import Follower
from scoped_a2a.client.follower import Mode
from scoped_a2a.client.pages import LivePage
from scoped_a2a.protocol.trajectory import LogEvent
from scoped_a2a.protocol.types import Task, TaskPushNotificationConfig
from scoped_a2a.push import PushSettings
from scoped_a2a.store.memory import MemoryTaskStore

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


class _NotJson:
    """Something an agent might hand over that JSON cannot encode (a model object, a handle)."""


async def test_an_unencodable_event_leaves_the_task_readable() -> None:
    """An agent that emits data JSON cannot encode must not corrupt its task: the store used to
    fold the event into the snapshot (and take a position) before encoding it, so every later
    GetTask / ListTasks / stream of the task failed, and the log had a hole that made cursor
    reads skip events."""
    refused: list[BaseException] = []

    async def agent(ctx: RunContext) -> str:
        await ctx.working("before")
        for emit in (lambda: ctx.artifact(data=_NotJson()),
                     lambda: ctx.trajectory({"obj": _NotJson()})):
            try:
                await emit()
            except Exception as exc:
                refused.append(exc)
        await ctx.working("after")
        return "done"

    app = A2AApp(agent)
    async with served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {"message": text_message("go")})
        assert "result" in body, body
        task = body["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert len(refused) == 2
        got = await rpc(client, url, "GetTask", {"id": task["id"]})
        assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = await rpc(client, url, "ListTasks", {})
        assert [t["id"] for t in listed["result"]["tasks"]] == [task["id"]]
        # The log has no hole: positions are 1..N, and a read from just before the end
        # returns the terminal event.
        page = await rpc(client, url, "scoped_a2a/trajectory/read",
                         {"taskId": task["id"], "after": 0})
        positions = [e["position"] for e in page["result"]["events"]]
        assert positions == list(range(1, len(positions) + 1))
        last = await rpc(client, url, "scoped_a2a/trajectory/read",
                         {"taskId": task["id"], "after": positions[-1] - 1})
        events = last["result"]["events"]
        assert [e["position"] for e in events] == [positions[-1]]
        assert last["result"]["hasMore"] is False


class _StoreThatFailsOnce(MemoryTaskStore):
    """A store that is unreachable for the next ``append`` (a shared store losing its link)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next_append = False

    async def append(self, task_id: str, event: LogEvent) -> int:
        if self.fail_next_append:
            self.fail_next_append = False
            raise ConnectionError("the task store is unreachable")
        return await super().append(task_id, event)


async def test_a_store_error_on_a_runs_first_write_fails_that_task_only() -> None:
    """The run's first write (its ``working`` status) sat outside the agent's error handling:
    a store error there escaped the run into the server nursery, which crashed every other run
    and left the app unable to start new ones (and recorded the task as canceled by the
    nursery). It must fail that task, and the server must go on serving."""
    store = _StoreThatFailsOnce()

    async def agent(ctx: RunContext) -> str:
        return "ok"

    app = A2AApp(agent, store=store)
    async with served(app) as url, httpx.AsyncClient() as client:
        store.fail_next_append = True
        first = await rpc(client, url, "SendMessage", {"message": text_message("one")})
        status = first["result"]["task"]["status"]
        assert status["state"] == "TASK_STATE_FAILED"
        # The caller sees the type and an error id; the text is in the log (failures.py).
        assert status["message"]["parts"][0]["text"].startswith("ConnectionError (error id ")
        second = await rpc(client, url, "SendMessage", {"message": text_message("two")})
        assert second["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


class _SlowPushStore(MemoryTaskStore):
    """A store whose push-config write takes a while (a network store), so a caller can hang
    up after the task was created but before its run started."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = anyio.Event()

    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        self.writing.set()
        # Slow, but within the send's set-up deadline: the set-up is shielded from the
        # hang-up, so it completes; the hang-up then cancels the run, and that end is recorded.
        await anyio.sleep(0.5)
        await super().set_push_config(task_id, config)


async def test_a_hang_up_between_storing_a_task_and_starting_its_run_records_an_end() -> None:
    """A send stores its task, then its push config, then starts the run. A hang-up during the
    push-config write used to leave the stored task ``submitted`` forever: no run, no recorded
    end, never evicted."""
    store = _SlowPushStore()

    async def agent(ctx: RunContext) -> str:
        await anyio.sleep(5)  # long enough that the hang-up, not the agent, ends the run
        return "ok"

    app = A2AApp(agent, store=store,
                 push=PushSettings(allow_hosts=["127.0.0.1"], shutdown_grace=0.2))
    params: dict[str, Any] = {
        "message": text_message("hi"),
        "configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/hook"}},
    }
    async with served(app) as url, httpx.AsyncClient() as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rpc, client, url, "SendMessage", params)
            with anyio.fail_after(5):
                await store.writing.wait()
            tg.cancel_scope.cancel()  # the caller hangs up
        with anyio.fail_after(5):
            while True:
                listed = await rpc(client, url, "ListTasks", {})
                tasks = listed["result"]["tasks"]
                assert len(tasks) == 1
                # Past submitted, it may show working for a moment before the hang-up's
                # cancellation is recorded: wait for its end.
                if tasks[0]["status"]["state"] not in ("TASK_STATE_SUBMITTED",
                                                       "TASK_STATE_WORKING"):
                    break
                await anyio.sleep(0.05)
        assert tasks[0]["status"]["state"] == "TASK_STATE_CANCELED"
        assert app.runner.active == 0


@pytest.mark.parametrize("mode", ["read", "subscribe"])
async def test_a_failing_sink_fails_the_follower_in_either_mode(mode: Mode) -> None:
    """``Follower.run`` promises to raise what the sink raises. Following by subscription ran
    the sink inside the read's error handling, so a sink error (a full disk) was taken for a
    refused read: following stopped with outcome ``refused`` and nothing was raised."""

    async def agent(ctx: RunContext) -> str:
        await ctx.trajectory({"step": 1})
        await anyio.sleep(0.2)
        return "done"

    class Full(OSError):
        pass

    async def sink(page: LivePage) -> None:
        raise Full("no space left on device")

    async with served(A2AApp(agent)) as url, A2AClient(url) as client:
        task = await client.send("go", return_immediately=True)
        assert isinstance(task, Task)
        follower = Follower(client, task.id, sink, mode=mode)
        with anyio.fail_after(5), pytest.raises(Full):
            await follower.run()
        assert follower.outcome == "error"
