"""A run's end that the store cannot take in time is retried in the background
(``runtime/ending.py``), and the retries stop at shutdown.

The store here is the in-memory one with its ends refused while ``down`` is set: what a Redis
failover or a locked SQLite file does to the end (tests/test_store_sqlite_hostile.py has the
real SQLite case). Served through hypercorn on both backends.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.errors import ServerUnavailable
from scoped_a2a.protocol.trajectory import LogEvent
from scoped_a2a.protocol.types import TaskStatusUpdateEvent
from scoped_a2a.store.memory import MemoryTaskStore

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


class EndsRefused(MemoryTaskStore):
    """Refuses terminal events while ``down``, as an unreachable store would."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.refused = 0

    async def append(self, task_id: str, event: LogEvent) -> int:
        if self.down and isinstance(event, TaskStatusUpdateEvent) and \
                event.status.state.terminal:
            self.refused += 1
            raise ServerUnavailable("the store is unreachable")
        return await super().append(task_id, event)


async def quick(ctx: RunContext) -> str:
    await anyio.sleep(0.05)
    return "done"


async def test_an_end_refused_for_a_while_is_recorded_and_the_send_answered() -> None:
    store = EndsRefused()
    app = A2AApp(quick, store=store)
    store.down = True
    answer: dict[str, Any] = {}
    async with served(app) as url, httpx.AsyncClient(timeout=30) as client:
        async with anyio.create_task_group() as tg:
            async def send() -> None:
                answer.update(await rpc(client, url, "SendMessage",
                                        {"message": text_message("hi")}))

            tg.start_soon(send)
            with anyio.fail_after(10):
                while not store.refused or not app.runner.ending.retrying:
                    await anyio.sleep(0.02)
            assert app.runner.active == 0 and not answer  # ended, but not recorded
            listed = (await rpc(client, url, "ListTasks", {}))["result"]["tasks"]
            assert [t["status"]["state"] for t in listed] == ["TASK_STATE_WORKING"]
            store.down = False
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
        assert app.runner.ending.retrying == 0


async def test_retries_stop_at_shutdown_and_do_not_hold_it(
        caplog: pytest.LogCaptureFixture) -> None:
    store = EndsRefused()
    app = A2AApp(quick, store=store)
    store.down = True
    async with served(app, grace=0.5) as url, httpx.AsyncClient(timeout=30) as client:
        await rpc(client, url, "SendMessage", {"message": text_message("hi"),
                                               "configuration": {"returnImmediately": True}})
        with anyio.fail_after(10):
            while not app.runner.ending.retrying:
                await anyio.sleep(0.02)
        began = time.monotonic()
    assert time.monotonic() - began < 5, "a retry held shutdown"
    assert app.runner.ending.retrying == 0
    assert "gave up recording the end of task" in caplog.text
