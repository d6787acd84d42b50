"""The conformance agent (scoped_a2a.agents.conformance): parks first, then works on its own.

The flows are the conformance kit's: a blocking send answered with a live task, GetTask polled
until the task is working, a follow-up that continues the task, a CancelTask of a working task.
"""

from __future__ import annotations

import anyio
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents import conformance
from scoped_a2a.agents.conformance import conformance_agent
from scoped_a2a.client import A2AClient
from scoped_a2a.client.client import user_message
from scoped_a2a.protocol.types import Task, TaskState
from scoped_a2a.runtime.policy import RunPolicy

from .helpers import served

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def short_park(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "PARK_SECONDS", 0.3)


async def wait_state(c: A2AClient, task_id: str, state: TaskState) -> Task:
    with anyio.fail_after(10):
        while True:
            task = await c.get_task(task_id)
            if task.status.state == state:
                return task
            await anyio.sleep(0.05)


@pytest.mark.parametrize("transport", ["jsonrpc", "rest"])
async def test_parks_then_works_until_canceled(anyio_backend: str, transport: str) -> None:
    app = A2AApp(conformance_agent, policy=RunPolicy(cancel_on_disconnect=False))
    async with served(app) as url, A2AClient(url, transport=transport) as c:
        task = await c.send("hello")  # blocking: returns when the task is interrupted
        assert isinstance(task, Task) and task.status.state == TaskState.INPUT_REQUIRED
        await wait_state(c, task.id, TaskState.WORKING)  # nobody answered: it works on
        canceled = await c.cancel(task.id)
        assert canceled.status.state == TaskState.CANCELED


async def test_follow_ups_continue_the_task_until_it_works(anyio_backend: str) -> None:
    app = A2AApp(conformance_agent, policy=RunPolicy(cancel_on_disconnect=False))
    async with served(app) as url, A2AClient(url) as c:
        task = await c.send("first")
        assert isinstance(task, Task)
        for text in ("second", "third"):
            more = await c.send(user_message(text, task_id=task.id, context_id=task.context_id))
            assert isinstance(more, Task) and more.id == task.id
            assert more.status.state == TaskState.INPUT_REQUIRED  # parked again
            assert more.artifacts and more.artifacts[-1].parts[0].text == f"You said: {text}"
        await wait_state(c, task.id, TaskState.WORKING)
        assert (await c.cancel(task.id)).status.state == TaskState.CANCELED


async def test_an_interactive_run_is_canceled_once_its_wait_ends_unheld(
        anyio_backend: str) -> None:
    """Served without --no-cancel-on-disconnect, the run is interactive: when its own wait for a
    follow-up ends, nobody holds it, so it is cancelled (reason hang-up) rather than working on
    for no one."""
    async with served(A2AApp(conformance_agent)) as url, A2AClient(url) as c:
        task = await c.send("hello")
        assert isinstance(task, Task) and task.status.state == TaskState.INPUT_REQUIRED
        await c.send(user_message("again", task_id=task.id, context_id=task.context_id))
        done = await wait_state(c, task.id, TaskState.CANCELED)
        assert done.status.message is not None
        assert (done.status.message.metadata or {}).get("reason") == "hang-up"
