"""The in-memory task store: the default, bounded in memory, one process.

Bounds: at most ``max_ended_tasks`` terminal tasks are kept (oldest-ended evicted first; running
tasks are never evicted), and each task keeps at most ``max_events_per_task`` log events (oldest
dropped first; the snapshot still reflects every event, so only a reader resuming from before the
retained window misses trajectory events, and streams then restart from the snapshot).

Waking readers: each task has one ``anyio.Event`` that is set and replaced on every append, so a
reader holds no buffer of its own. A slow reader lags on its cursor and never slows the run or
other readers.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque

import anyio
import msgspec

from ..protocol.errors import InvalidParams, TaskNotFound
from ..protocol.trajectory import LogEvent
from ..protocol.types import (
    ListTasksRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
)
from .base import LogEntry, LogPage, TaskEnded, TaskPage, TaskStore
from .snapshot import apply_event

_encode = msgspec.json.Encoder().encode


class _Record:
    __slots__ = ("changed", "events", "last", "owner", "push", "seq", "task")

    def __init__(self, task: Task, seq: int, owner: str = "") -> None:
        self.task = task
        self.owner = owner  # the principal id that may see the task ("" = anonymous)
        self.seq = seq  # creation order, for ListTasks paging
        self.events: deque[LogEntry] = deque()
        self.last = 0
        self.changed = anyio.Event()
        self.push: dict[str, TaskPushNotificationConfig] = {}

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class MemoryTaskStore(TaskStore):
    def __init__(self, *, max_ended_tasks: int = 10_000, max_events_per_task: int = 10_000) -> None:
        if max_ended_tasks < 1 or max_events_per_task < 1:
            raise ValueError("store bounds must be positive")
        self.max_ended_tasks = max_ended_tasks
        self.max_events_per_task = max_events_per_task
        self._tasks: dict[str, _Record] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()  # oldest-ended first
        self._seq = itertools.count(1)

    def __len__(self) -> int:
        return len(self._tasks)

    def _record(self, task_id: str) -> _Record:
        rec = self._tasks.get(task_id)
        if rec is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return rec

    async def create(self, task: Task, *, owner: str = "") -> None:
        if task.id in self._tasks:
            raise InvalidParams(f"task {task.id!r} already exists")
        self._tasks[task.id] = _Record(task, next(self._seq), owner)

    async def owner_of(self, task_id: str) -> str:
        return self._record(task_id).owner

    async def get(self, task_id: str) -> tuple[Task, int]:
        rec = self._record(task_id)
        return rec.task, rec.last

    async def append(self, task_id: str, event: LogEvent) -> int:
        rec = self._record(task_id)
        if rec.task.status.state.terminal:
            raise TaskEnded(task_id)
        # Encode first: an event JSON cannot encode is refused before it changes the snapshot
        # or takes a position (either would break every later read of the task).
        encoded = _encode(event)
        apply_event(rec.task, event)
        rec.last += 1
        rec.events.append(LogEntry(rec.last, event, encoded))
        if len(rec.events) > self.max_events_per_task:
            rec.events.popleft()
        if rec.task.status.state.terminal:
            self._ended[task_id] = None
            self._evict()
        rec.wake()
        return rec.last

    def _evict(self) -> None:
        while len(self._ended) > self.max_ended_tasks:
            task_id, _ = self._ended.popitem(last=False)
            rec = self._tasks.pop(task_id, None)
            if rec is not None:
                rec.wake()  # waiters re-read and learn the task is gone

    async def read(
        self, task_id: str, after: int, *, max_events: int = 1000, max_bytes: int = 1 << 20
    ) -> LogPage:
        rec = self._record(task_id)
        events = rec.events
        first = events[0].position if events else rec.last + 1
        entries: list[LogEntry] = []
        if after < rec.last:
            start = max(after + 1, first) - first
            size = 0
            for i in range(start, len(events)):
                entry = events[i]
                size += len(entry.encoded)
                # The first entry is always returned, whatever its size.
                if entries and (len(entries) >= max_events or size > max_bytes):
                    break
                entries.append(entry)
        nxt = entries[-1].position if entries else max(after, first - 1)
        return LogPage(entries, nxt, nxt < rec.last, rec.task, first)

    async def wait(self, task_id: str, after: int) -> None:
        rec = self._record(task_id)
        if rec.last > after:
            return
        await rec.changed.wait()

    async def list_tasks(self, request: ListTasksRequest, *, owner: str | None = None) -> TaskPage:
        size = request.page_size or 50
        if not 1 <= size <= 100:
            raise InvalidParams("pageSize must be between 1 and 100")
        before = None
        if request.page_token:
            try:
                before = int(request.page_token)
            except ValueError:
                raise InvalidParams("pageToken is not one this server issued") from None
        matched: list[_Record] = []
        for rec in reversed(self._tasks.values()):
            if owner is not None and rec.owner != owner:
                continue
            t = rec.task
            if request.context_id is not None and t.context_id != request.context_id:
                continue
            if request.status is not None and t.status.state != request.status:
                continue
            if (
                request.status_timestamp_after is not None
                and (t.status.timestamp or "") <= request.status_timestamp_after
            ):
                continue
            matched.append(rec)
        page = [r for r in matched if before is None or r.seq < before][:size]
        more = bool(page) and matched[-1].seq < page[-1].seq
        token = str(page[-1].seq) if more else ""
        return TaskPage([r.task for r in page], token, len(matched), size)

    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        rec = self._record(task_id)
        assert config.id is not None
        rec.push[config.id] = config

    async def push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]:
        return list(self._record(task_id).push.values())

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        return self._record(task_id).push.pop(config_id, None) is not None


__all__ = ["MemoryTaskStore", "TaskArtifactUpdateEvent", "TaskStatusUpdateEvent"]
