"""CancelTask racing a run's own end: the answer is a canceled task or -32002, never another end.

A run that returns at the moment CancelTask cancels its scope completes (the agent's return beat
the cancellation; terminal states never change). CancelTask must then say the task could not be
canceled (-32002), not hand back the completed task as if the cancel had worked.
"""

from __future__ import annotations

import random
from collections import Counter

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, MemoryTaskStore, RunContext, Task

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio

ROUNDS = 200
TASK_NOT_CANCELABLE = -32002


async def quick_agent(ctx: RunContext) -> str:
    """Ends on its own 0-2 ms after it starts: about when a CancelTask sent at once lands."""
    await anyio.sleep(random.uniform(0, 0.002))
    return "done"


async def test_cancel_racing_completion_is_canceled_or_not_cancelable() -> None:
    app = A2AApp(quick_agent)
    outcomes: Counter[str] = Counter()
    async with served(app) as url, httpx.AsyncClient() as client:
        for _ in range(ROUNDS):
            sent = await rpc(client, url, "SendMessage", {
                "message": text_message("go"), "configuration": {"returnImmediately": True}})
            task_id = sent["result"]["task"]["id"]
            answer = await rpc(client, url, "CancelTask", {"id": task_id})
            if "error" in answer:
                assert answer["error"]["code"] == TASK_NOT_CANCELABLE, answer
                outcomes["not-cancelable"] += 1
                # The refusal is true: the task really ended some other way.
                got = await rpc(client, url, "GetTask", {"id": task_id})
                assert got["result"]["status"]["state"] != "TASK_STATE_CANCELED", got
            else:
                state = answer["result"]["status"]["state"]
                assert state == "TASK_STATE_CANCELED", (
                    f"CancelTask answered a {state} task after {dict(outcomes)}")
                outcomes["canceled"] += 1
    # Not asserted: how the rounds split between the two outcomes depends on the machine's load
    # (here about 2:1); the race's losing order is forced in the next test.
    print(f"\n{dict(outcomes)}")


class ReleasingStore(MemoryTaskStore):
    """Reading a task releases its run: the run ends right as CancelTask looks at the task.

    CancelTask reads the task, sees it running, then cancels the run's scope; a run released by
    that read is already scheduled to return when the cancel lands, so it completes. This puts
    the race's losing order into every round instead of one in thousands.
    """

    def __init__(self) -> None:
        super().__init__()
        self.release: dict[str, anyio.Event] = {}

    async def get(self, task_id: str) -> tuple[Task, int]:
        event = self.release.get(task_id)
        if event is not None:
            event.set()
        return await super().get(task_id)


async def test_cancel_of_a_run_that_completes_meanwhile_is_not_cancelable() -> None:
    store = ReleasingStore()

    async def released_agent(ctx: RunContext) -> str:
        await store.release.setdefault(ctx.task_id, anyio.Event()).wait()
        return "done"

    app = A2AApp(released_agent, store=store)
    async with served(app) as url, httpx.AsyncClient() as client:
        for _ in range(5):
            sent = await rpc(client, url, "SendMessage", {
                "message": text_message("go"), "configuration": {"returnImmediately": True}})
            task_id = sent["result"]["task"]["id"]
            with anyio.fail_after(5):
                while task_id not in store.release:  # the run waits for its release
                    await anyio.sleep(0.001)
            answer = await rpc(client, url, "CancelTask", {"id": task_id})
            assert answer.get("error", {}).get("code") == TASK_NOT_CANCELABLE, answer
            assert "completed" in answer["error"]["message"], answer
            got = await rpc(client, url, "GetTask", {"id": task_id})
            assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED", got
