"""The in-memory store: terminal states never change, bounds hold, reads are bounded."""

from __future__ import annotations

import pytest

from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.trajectory import TrajectoryEvent
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
