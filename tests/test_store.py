"""The in-memory store: terminal states never change, bounds hold, reads are bounded."""

from __future__ import annotations

import anyio
import pytest

from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.trajectory import LogEvent, TrajectoryEvent
from scoped_a2a.protocol.types import Task, TaskState, TaskStatus, TaskStatusUpdateEvent
from scoped_a2a.store.base import TaskEnded
from scoped_a2a.store.memory import MemoryTaskStore

pytestmark = pytest.mark.anyio


def task(task_id: str) -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=TaskState.SUBMITTED))


def status(task_id: str, state: TaskState) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task_id, context_id="c",
                                 status=TaskStatus(state=state))


async def test_terminal_states_never_change() -> None:
    store = MemoryTaskStore()
    await store.create(task("t"))
    await store.append("t", status("t", TaskState.COMPLETED))
    with pytest.raises(TaskEnded):
        await store.append("t", status("t", TaskState.CANCELED))
    snap, pos = await store.get("t")
    assert snap.status.state is TaskState.COMPLETED and pos == 1


async def test_ended_tasks_are_evicted_oldest_first_and_running_ones_never() -> None:
    store = MemoryTaskStore(max_ended_tasks=2)
    for name in "abcd":
        await store.create(task(name))
    for name in "abc":
        await store.append(name, status(name, TaskState.COMPLETED))
    with pytest.raises(TaskNotFound):
        await store.get("a")
    for name in "bcd":
        await store.get(name)  # d is still running: never evicted


async def test_per_task_log_cap_keeps_the_snapshot_whole() -> None:
    store = MemoryTaskStore(max_events_per_task=3)
    await store.create(task("t"))
    for i in range(5):
        await store.append("t", TrajectoryEvent(task_id="t", context_id="c", data={"i": i}))
    page = await store.read("t", 0)
    assert [e.position for e in page.entries] == [3, 4, 5]
    assert page.first_retained == 3


async def test_reads_are_bounded_and_the_first_event_always_comes() -> None:
    store = MemoryTaskStore()
    await store.create(task("t"))
    for i in range(10):
        await store.append("t", TrajectoryEvent(task_id="t", context_id="c",
                                                data={"pad": "z" * 100, "i": i}))
    page = await store.read("t", 0, max_events=3)
    assert [e.position for e in page.entries] == [1, 2, 3] and page.has_more
    page = await store.read("t", 3, max_bytes=1)
    assert [e.position for e in page.entries] == [4] and page.next == 4
    page = await store.read("t", 10)
    assert page.entries == [] and not page.has_more and page.next == 10


async def test_unknown_tasks_are_not_found() -> None:
    store = MemoryTaskStore()
    for call in (store.get("x"), store.read("x", 0), store.wait("x", 0)):
        with pytest.raises(TaskNotFound):
            await call


async def test_the_memory_store_never_waits_as_it_says_and_a_subclass_may() -> None:
    """``may_suspend`` False lets a send and a run skip shields (no cancellation can land where
    nothing waits): every method it speaks for returns inside an already-cancelled scope."""
    store = MemoryTaskStore()
    assert store.may_suspend is False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.create(task("t"), owner="alice")
        await store.append("t", status("t", TaskState.WORKING))
        await store.get("t")
        await store.check_owner("t", "alice")
        assert await store.owner_of("t") == "alice"
        await store.append("t", status("t", TaskState.COMPLETED))
        await store.get("t")
    assert not scope.cancelled_caught  # nothing reached a checkpoint

    class Slow(MemoryTaskStore):
        async def append(self, task_id: str, event: LogEvent) -> int:
            await anyio.sleep(0)
            return await super().append(task_id, event)

    assert Slow().may_suspend is True  # an override may wait: callers keep their shields

    class Queued(MemoryTaskStore):
        def run_launcher(self) -> None:  # a durable queue would go here; sends wait on it
            return None

    assert Queued().may_suspend is True
