"""Ended tasks in the memory store, for the packing tests: how they are made and read.

Shared by test_stored.py (tasks packed alone or batched, read in process and over HTTP) and
test_batched.py (many small tasks in batches).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from scoped_a2a.protocol.trajectory import TrajectoryEvent
from scoped_a2a.protocol.types import (
    Artifact,
    ListTasksRequest,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from scoped_a2a.store import batched, cooling, packed
from scoped_a2a.store.memory import MemoryTaskStore

encode = msgspec.json.encode


def new_task(task_id: str, context: str = "c") -> Task:
    msg = Message(message_id=f"m-{task_id}", role=Role.USER, parts=[Part(text="go")],
                  task_id=task_id, context_id=context)
    return Task(id=task_id, context_id=context, status=TaskStatus(state=TaskState.SUBMITTED),
                history=[msg])


def status(task_id: str, state: TaskState, text: str | None = None) -> TaskStatusUpdateEvent:
    msg = None
    if text is not None:
        msg = Message(message_id=f"r-{task_id}-{text}", role=Role.AGENT,
                      parts=[Part(text=text)], task_id=task_id, context_id="c")
    return TaskStatusUpdateEvent(task_id=task_id, context_id="c",
                                 status=TaskStatus(state=state, message=msg,
                                                   timestamp="2026-12-01T10:00:00.000Z"))


async def chatter(store: MemoryTaskStore, task_id: str, steps: int = 30, pad: int = 0) -> None:
    """A task like the benchmark's chatter agent: status updates, trajectory events, artifacts."""
    await store.create(new_task(task_id))
    for i in range(steps):
        await store.append(task_id, status(task_id, TaskState.WORKING, f"step {i}"))
        await store.append(task_id, TrajectoryEvent(
            task_id=task_id, context_id="c", data={"step": i, "pad": "p" * pad}))
        if i % 10 == 0:
            await store.append(task_id, TaskArtifactUpdateEvent(
                task_id=task_id, context_id="c", append=i > 0,
                artifact=Artifact(artifact_id="a", parts=[Part(text=f"chunk {i}")])))
    await store.append(task_id, status(task_id, TaskState.COMPLETED, "done"))


def is_packed(store: MemoryTaskStore, task_id: str) -> bool:
    # Reaching in on purpose: reads must not tell, so only the record can.
    return isinstance(store._tasks[task_id].ended, (packed.Packed, batched.InBatch))


def alone_or_batched(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Make the store pack every task on its own (blocks), or every one in batches."""
    if how == "alone":
        monkeypatch.setattr(cooling, "SMALL_TASK_BYTES", -1)
    else:
        monkeypatch.setattr(cooling, "SMALL_TASK_BYTES", 1 << 30)


async def every_read(store: MemoryTaskStore, task_id: str) -> list[Any]:
    """Everything a reader can get of the task, as JSON-comparable values."""
    snap, pos = await store.get(task_id)
    out: list[Any] = [encode(snap), pos]
    for after in range(pos + 2):
        for max_events in (1, 2, 7, 1000):
            for max_bytes in (1, 300, 5000, 1 << 20):
                page = await store.read(task_id, after, max_events=max_events,
                                        max_bytes=max_bytes)
                out.append((
                    [(e.position, encode(e.event), e.encoded) for e in page.entries],
                    page.next, page.has_more, encode(page.task), page.first_retained,
                ))
    for owner in (None, ""):
        listed = await store.list_tasks(ListTasksRequest(context_id="c", page_size=100),
                                        owner=owner)
        out.append([encode(t) for t in listed.tasks if t.id == task_id])
    return out
