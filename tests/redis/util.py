"""Small helpers of the Redis tests: reading a task's log and waiting for task states."""

from __future__ import annotations

from typing import Any

import anyio

from scoped_a2a.protocol.trajectory import TrajectoryEvent
from scoped_a2a.protocol.types import Task, TaskStatusUpdateEvent
from scoped_a2a.store.redis import RedisTaskStore


async def log_of(store: RedisTaskStore, task_id: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The task's ``start`` trajectory events and the states of its status updates."""
    page = await store.read(task_id, 0, max_events=10_000, max_bytes=1 << 30)
    starts = [e.event.data for e in page.entries
              if isinstance(e.event, TrajectoryEvent) and e.event.data.get("type") == "start"]
    states = [e.event.status.state.name for e in page.entries
              if isinstance(e.event, TaskStatusUpdateEvent)]
    return starts, states


async def wait_until_ended(store: RedisTaskStore, task_ids: list[str], timeout: float) -> list[Task]:
    """Poll until every task is terminal (fails after ``timeout`` seconds)."""
    pending = list(task_ids)
    ended: dict[str, Task] = {}
    with anyio.fail_after(timeout):
        while pending:
            still = []
            for task_id in pending:
                task, _ = await store.get(task_id)
                if task.status.state.terminal:
                    ended[task_id] = task
                else:
                    still.append(task_id)
            pending = still
            if pending:
                await anyio.sleep(0.1)
    return [ended[t] for t in task_ids]


async def wait_for_start(store: RedisTaskStore, task_id: str, timeout: float = 30.0
                         ) -> dict[str, Any]:
    """The first ``start`` event of the task's run, once it is logged."""
    with anyio.fail_after(timeout):
        while True:
            starts, _ = await log_of(store, task_id)
            if starts:
                return starts[0]
            await anyio.sleep(0.05)
