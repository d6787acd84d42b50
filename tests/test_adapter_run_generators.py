"""A cancelled executor run's async generators left suspended are closed (the model stream a
framework stopped reading between two chunks: adapters/run_generators.py).

Over real HTTP through hypercorn, with an a2a-sdk 1.x executor (tests/sdk_executors.py) that
keeps its stream referenced, as BeeAI's reference cycle does: only the adapter's ``aclose``
runs the stream's ``finally``. a2a-sdk is asyncio-bound (trio is refused, tested elsewhere);
``on_cancel`` (what stops before the work sees its cancellation) is tested on both backends.
The same with BeeAI's real LiteLLM stream: tests/sdk03/test_frameworks_sdk03.py.
"""

from __future__ import annotations

import asyncio

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.adapters.a2a_sdk import from_executor

from .helpers import rpc, served, text_message
from .sdk_executors import HeldStreamExecutor, Journal
from .test_adapter_a2a_sdk import send, wait_state

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


@asyncio_only
async def test_a_hang_up_closes_the_stream_the_executor_left_suspended() -> None:
    journal = Journal(running=asyncio.Event())
    executor = HeldStreamExecutor(journal)
    app = A2AApp(from_executor(executor))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, c, url, "read forever")
            with anyio.fail_after(10):
                await journal.running.wait()
            tg.cancel_scope.cancel()  # the caller hangs up
        task_id = journal.started[0]
        await wait_state(c, url, task_id, "TASK_STATE_CANCELED")
    assert executor.closed == [task_id], (executor.closed, executor.held)
    assert journal.cancelled == [task_id]


@asyncio_only
async def test_a_run_that_ends_by_itself_leaves_its_generators_to_their_owner() -> None:
    journal = Journal()
    executor = HeldStreamExecutor(journal, items=3)
    async with served(A2AApp(from_executor(executor))) as url, httpx.AsyncClient() as c:
        body = await rpc(c, url, "SendMessage", {"message": text_message("three")})
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert executor.closed == []  # still held by the executor, suspended, not closed by us


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_on_cancel_runs_before_the_work_sees_its_cancellation() -> None:
    """What must stop at once (CrewAI's model sockets) stops before the work's own
    cancellation handlers run (runtime.abandon.run_abandonable's on_cancel)."""
    from scoped_a2a.runtime.abandon import run_abandonable

    order: list[str] = []
    started = anyio.Event()

    async def work() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            order.append("work saw its cancellation")

    async with anyio.create_task_group() as nursery:
        with anyio.CancelScope() as run:
            async def cancel_once_started() -> None:
                await started.wait()
                run.cancel()

            nursery.start_soon(cancel_once_started)
            await run_abandonable(nursery, work, cancel_grace=1.0, name="work",
                                  on_cancel=lambda: order.append("on_cancel"))
    assert order == ["on_cancel", "work saw its cancellation"]
