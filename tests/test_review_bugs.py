"""Regression tests for bugs found in review: each one names the scenario it guards."""

from __future__ import annotations

import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.trajectory import LogEvent
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
        assert "the task store is unreachable" in status["message"]["parts"][0]["text"]
        second = await rpc(client, url, "SendMessage", {"message": text_message("two")})
        assert second["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
