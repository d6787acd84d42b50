"""Deterministic timing of followers and steps, on trio with a mock clock (no real sleeps).

``MockClock(autojump_threshold=0)`` jumps virtual time to the next deadline whenever every task
is blocked, so backoff schedules and drain deadlines are checked exactly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from scoped_a2a.client import AgentUnreachable, Backoff, Follower, MemorySink, Step
from scoped_a2a.client.abandon import RemoteTask
from scoped_a2a.client.card import AgentCapabilities, AgentCard, AgentExtension
from scoped_a2a.client.pages import LivePage
from scoped_a2a.client.wire import StreamEvent
from scoped_a2a.protocol.trajectory import TRAJECTORY_EXTENSION_URI
from scoped_a2a.protocol.types import (
    Message,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


class FakeAgent:
    """Stands in for an A2AClient: one turn that completes at once; reads as configured."""

    url = "fake://agent"

    def __init__(self, reads: str) -> None:
        self.reads = reads  # "fail" | "hang" | "quiet" (an open task with no new events)
        self.read_times: list[float] = []

    async def card(self) -> AgentCard:
        ext = [AgentExtension(uri=TRAJECTORY_EXTENSION_URI)]
        return AgentCard(capabilities=AgentCapabilities(streaming=True, extensions=ext))

    async def offers_trajectory(self) -> bool:
        return True

    def remote_task(self, message: Message, **kw: Any) -> RemoteTask:
        return RemoteTask(self, held=kw["held"])  # type: ignore[arg-type]

    async def read_trajectory(self, task_id: str, after: int = 0, **_: Any) -> LivePage:
        self.read_times.append(anyio.current_time())
        if len(self.read_times) > 500:  # a follower that spins without ever stopping
            raise AssertionError("the follower kept reading")
        if self.reads == "hang":
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()
        if self.reads == "fail":
            raise AgentUnreachable("the agent is down")
        return LivePage(task_id, after, after, [], TaskState.WORKING)

    @asynccontextmanager
    async def stream(self, message: Message, **kw: Any) -> AsyncIterator[Any]:
        status = TaskStatus(state=TaskState.SUBMITTED)
        task = Task(id="t1", context_id="c1", status=status)
        done = TaskStatusUpdateEvent(task_id="t1", context_id="c1",
                                     status=TaskStatus(state=TaskState.COMPLETED))
        yield _Events([StreamEvent(task, 0), StreamEvent(done, 1)], kw.get("owner"))


class _Events:
    """The stream's events; like A2AClient.stream's, each is folded into the owner's task."""

    def __init__(self, items: list[StreamEvent], owner: RemoteTask | None) -> None:
        self.items = items
        self.owner = owner

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> StreamEvent:
        await anyio.lowlevel.checkpoint()
        if not self.items:
            raise StopAsyncIteration
        item = self.items.pop(0)
        if self.owner is not None:
            self.owner.see(item.event)
        return item


def test_backoff_is_capped_exponential_with_jitter() -> None:
    b = Backoff(initial=0.1, factor=2, cap=1.0, jitter=0.5, random=lambda: 0.0)
    assert [b.delay(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    shortest = Backoff(initial=0.1, factor=2, cap=1.0, jitter=0.5, random=lambda: 1.0)
    assert shortest.delay(3) == pytest.approx(0.2)
    assert Backoff().delay(10_000) <= Backoff().cap  # no overflow, capped


async def test_failed_reads_back_off_while_open_and_one_ends_it_after_stop() -> None:
    agent = FakeAgent("fail")
    backoff = Backoff(initial=1.0, factor=2.0, cap=8.0, jitter=0.5, random=lambda: 0.5)
    follower = Follower(agent, "t1", MemorySink().turn("x"), mode="read", backoff=backoff)
    start = anyio.current_time()
    with anyio.fail_after(1000):  # virtual seconds: a follower that never ends fails the test
        async with anyio.create_task_group() as tg:
            tg.start_soon(follower.run)
            await anyio.sleep(30)
            follower.stop.set()
    # delays 0.75, 1.5, 3, 6, 6 (capped), ...; stop at 30 wakes the pause for one last read
    assert [t - start for t in agent.read_times] == pytest.approx(
        [0, 0.75, 2.25, 5.25, 11.25, 17.25, 23.25, 29.25, 30])
    assert anyio.current_time() - start == pytest.approx(30)
    assert follower.outcome == "read-failed"
    assert follower.failed_reads_after_stop == 1


async def test_open_turn_is_polled_and_drained_once_stopped() -> None:
    agent = FakeAgent("quiet")
    follower = Follower(agent, "t1", MemorySink().turn("x"), mode="read", poll_interval=0.25)
    start = anyio.current_time()
    with anyio.fail_after(1000):  # virtual seconds: a follower that never ends fails the test
        async with anyio.create_task_group() as tg:
            tg.start_soon(follower.run)
            await anyio.sleep(1.1)
            follower.stop.set()
    assert [t - start for t in agent.read_times] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0, 1.1])
    assert follower.outcome == "drained" and follower.failed_reads == 0


async def test_a_hanging_read_times_out_then_ends_following_after_stop() -> None:
    agent = FakeAgent("hang")
    follower = Follower(agent, "t1", MemorySink().turn("x"), mode="read", read_timeout=4)
    start = anyio.current_time()
    with anyio.fail_after(1000):  # virtual seconds: a follower that never ends fails the test
        async with anyio.create_task_group() as tg:
            tg.start_soon(follower.run)
            await anyio.sleep(1)
            follower.stop.set()
    assert anyio.current_time() - start == pytest.approx(4)  # the in-flight read's deadline
    assert follower.outcome == "read-failed" and follower.failed_reads_after_stop == 1


@pytest.mark.parametrize(("reads", "ending", "took"), [
    ("hang", "returns", 7.0),   # draining followers get drain_timeout, then are cancelled
    ("fail", "returns", 0.0),   # ...but one failed read after the turn ended ends them at once
    ("quiet", "returns", 0.0),  # ...and so does a complete page
    ("hang", "raises", 0.0),    # a raising body cancels them at once
    ("hang", "cancelled", 0.0),  # and so does a cancelled one
])
async def test_step_drain_deadline(reads: str, ending: str, took: float) -> None:
    agent = FakeAgent(reads)
    sink = MemorySink()
    started = 0.0
    with anyio.fail_after(1000), anyio.CancelScope() as outer:
        try:
            async with Step(agent, sink=sink, drain_timeout=7.0, read_timeout=100.0,  # type: ignore[arg-type]
                            poll_interval=50.0) as step:
                task = await step.turn("hi")
                assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
                await anyio.sleep(0.5)  # the follower is now in a read or a pause
                started = anyio.current_time()
                if ending == "raises":
                    raise RuntimeError("body failed")
                if ending == "cancelled":
                    outer.cancel()
                    await anyio.lowlevel.checkpoint()
        except RuntimeError:
            pass
    assert anyio.current_time() - started == pytest.approx(took)
    assert sink.turns["0001"].end == {"state": "TASK_STATE_COMPLETED", "next": 0}
    assert step.turns[0].follower is not None and step.turns[0].follower.done.is_set()
