"""The in-memory task store: the default, bounded in memory, one process.

Bounds (docs/memory.md has the figures):

- Ended tasks: at most ``max_ended_tasks`` of them and about ``max_ended_bytes`` of their encoded
  JSON, whichever binds first; the oldest-ended are evicted first. Running tasks are never
  evicted, and neither is the most recently ended task, so one task larger than the whole budget
  is still readable until the next task ends.
- Each task keeps at most ``max_events_per_task`` log events (oldest dropped first; the snapshot
  still reflects every event, so only a reader resuming from before the retained window misses
  trajectory events, and streams then restart from the snapshot).

How an ended task is kept: once a task ends nothing can change it, so its snapshot is encoded
once and its retained log entries are kept as the encoded bytes every reader already used; the
object trees are dropped. An ended task then costs about its encoded size (which is what the byte
budget counts), and reads decode what they return (a fresh copy each time). A running task keeps
its snapshot and events as objects, because streams and appends read them constantly. One task's
record, in either form, is :class:`~.memory_record.TaskRecord`; this module holds the store: its
index, bounds, eviction, waiting readers, claims and push configs.

Waking readers: each task has one ``anyio.Event`` that is set and replaced on every append, so a
reader holds no buffer of its own. A slow reader lags on its cursor and never slows the run or
other readers.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

from ..protocol.errors import InvalidParams, TaskNotFound
from ..protocol.trajectory import LogEvent
from ..protocol.types import (
    ListTasksRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
)
from .base import LogEntry, LogPage, TaskEnded, TaskPage, TaskStore, page_bounds
from .claims import DEFAULT_CLAIM_WINDOW, MemoryClaims, PriorSend, claim_key
from .cooling import Cooling
from .memory_record import ENDED_EVENT_OVERHEAD, ENDED_TASK_OVERHEAD, TaskRecord, encode_compact
from .packed import Frozen
from .snapshot import apply_event

DEFAULT_MAX_ENDED_BYTES = 256 << 20
"""256 MiB of ended tasks by default: a few hundred large (1 MiB) conversations, or the whole
count cap of small ones (10,000 tasks of a few KiB), while staying well inside a small
container's memory next to the running tasks, which no cap on ended ones bounds."""

_NEVER_WAIT = ("create", "append", "get", "owner_of", "check_owner", "run_launcher")
"""The methods ``may_suspend`` speaks for: none of this class's awaits anything (and it has no
run launcher, whose durable queue a send would wait on)."""


class MemoryTaskStore(TaskStore):
    """Tasks in this process's memory, bounded as the module says.

    :param max_ended_tasks: ended tasks kept (oldest-ended evicted first).
    :param max_ended_bytes: about how many bytes of ended tasks are kept: their encoded JSON
        (snapshot plus kept log events) plus a small fixed overhead per task and per event.
    :param max_events_per_task: log events kept per task, running or ended.
    :param claim_window: seconds a message claim outlives its evicted task (claims.py); such
        lingering claims count against ``max_ended_bytes`` too.
    """

    def __init__(
        self, *, max_ended_tasks: int = 10_000, max_events_per_task: int = 10_000,
        max_ended_bytes: int = DEFAULT_MAX_ENDED_BYTES, claim_window: float = DEFAULT_CLAIM_WINDOW,
    ) -> None:
        if max_ended_tasks < 1 or max_events_per_task < 1 or max_ended_bytes < 1:
            raise ValueError("store bounds must be positive")
        self.max_ended_tasks = max_ended_tasks
        self.max_ended_bytes = max_ended_bytes
        self.max_events_per_task = max_events_per_task
        self._tasks: dict[str, TaskRecord] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()  # oldest-ended first
        self._ended_bytes = 0
        self._cooling = Cooling(self._plain)  # ended tasks on their way to being packed
        self._seq = itertools.count(1)
        self._claims = MemoryClaims(claim_window, self._tasks.__contains__)
        # This class's own methods never wait; a subclass's overrides may (tests gate them).
        self._may_suspend = any(getattr(type(self), name) is not getattr(MemoryTaskStore, name)
                                for name in _NEVER_WAIT)

    @property
    def may_suspend(self) -> bool:
        return self._may_suspend

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def ended_bytes(self) -> int:
        """The bytes the ended tasks kept now count against ``max_ended_bytes``."""
        return self._ended_bytes

    def _record(self, task_id: str) -> TaskRecord:
        rec = self._tasks.get(task_id)
        if rec is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return rec

    async def create(self, task: Task, *, owner: str = "") -> None:
        if task.id in self._tasks:
            raise InvalidParams(f"task {task.id!r} already exists")
        self._tasks[task.id] = TaskRecord(task, next(self._seq), owner)

    async def owner_of(self, task_id: str) -> str:
        return self._record(task_id).owner

    async def get(self, task_id: str) -> tuple[Task, int]:
        rec = self._record(task_id)
        return rec.snapshot(), rec.last

    async def append(self, task_id: str, event: LogEvent) -> int:
        rec = self._record(task_id)
        task = rec.task
        if task is None or task.status.state.terminal:
            raise TaskEnded(task_id)
        # Encode first: an event JSON cannot encode is refused before it changes the snapshot
        # or takes a position (either would break every later read of the task).
        encoded = encode_compact(event)
        apply_event(task, event)
        rec.last += 1
        rec.events.append(LogEntry(rec.last, event, encoded))
        if len(rec.events) > self.max_events_per_task:
            rec.events.popleft()
        rec.state, rec.timestamp = task.status.state, task.status.timestamp
        if task.status.state.terminal:
            self._ended_bytes += rec.freeze()
            self._ended[task_id] = None
            self._cooling.ended(task_id)
            self._evict(task_id)
            self._pack(rec.size)
        rec.wake()
        return rec.last

    def _plain(self, task_id: str) -> tuple[TaskRecord, Frozen] | None:
        """The record and plain JSON of an ended task still here and not packed yet."""
        rec = self._tasks.get(task_id)
        return (rec, rec.ended) if rec is not None and isinstance(rec.ended, Frozen) else None

    def _pack(self, ended_size: int) -> None:
        """Pack what has cooled (cooling.py); keep each packed form whose task is still here
        and plain, and counts less packed (incompressible JSON stays plain)."""
        for rec, frozen, packed in self._cooling.pack(ended_size):
            size = packed.size() + ENDED_TASK_OVERHEAD
            if rec.ended is frozen and size < rec.size:  # (an evicted task's ``ended`` is None)
                self._ended_bytes += size - rec.size
                rec.ended, rec.size = packed, size

    def _evict(self, newest: str, reading: str = "") -> None:
        """Evict oldest-ended tasks until both caps hold again.

        Skipped: ``newest`` (so a task larger than the budget can still be read once), tasks
        with readers that were waiting for them when they ended (a blocking send reads its own
        task's end right after waking; evicting it in between would lose the answer), and
        ``reading`` (a waiter about to read it). A skipped task is evicted by a later pass: the
        next task end, or its last pin's release (:meth:`_unpinned`).
        """
        claims = self._claims
        claims.expire()
        # Lingering claims (of tasks already evicted) go before any task is evicted for room.
        claims.trim(self.max_ended_bytes - self._ended_bytes)
        count, size = len(self._ended), self._ended_bytes + claims.size
        if count <= self.max_ended_tasks and size <= self.max_ended_bytes:
            return
        victims: list[str] = []
        for task_id in self._ended:
            if count <= self.max_ended_tasks and size <= self.max_ended_bytes:
                break
            rec = self._tasks[task_id]
            if task_id in (newest, reading) or rec.pins:
                continue
            victims.append(task_id)
            count -= 1
            size -= rec.size
        for task_id in victims:
            del self._ended[task_id]
            rec = self._tasks.pop(task_id)
            self._ended_bytes -= rec.size
            rec.ended = None  # the bytes go now, even if a packing in progress still holds rec
            rec.wake()  # waiters re-read and learn the task is gone
            claims.task_gone(task_id)

    @property
    def claim_bytes(self) -> int:
        """The bytes lingering message claims count against ``max_ended_bytes`` now."""
        return self._claims.size

    async def claim_message(
        self, owner: str, message_id: str, fingerprint: bytes, task_id: str, *,
        position: int = 0, created: bool = False,
    ) -> PriorSend | None:
        return self._claims.claim(claim_key(owner, message_id), fingerprint, task_id, position)

    async def reclaim_message(
        self, owner: str, message_id: str, old_task_id: str, new_task_id: str
    ) -> PriorSend | None:
        return self._claims.replace(claim_key(owner, message_id), old_task_id, new_task_id)

    async def release_message(self, owner: str, message_id: str, task_id: str) -> None:
        self._claims.release(claim_key(owner, message_id), task_id)

    async def read(
        self, task_id: str, after: int, *, max_events: int = 1000, max_bytes: int = 1 << 20
    ) -> LogPage:
        rec = self._record(task_id)
        entries, task = rec.page(after, max_events, max_bytes)
        first = rec.first_kept()
        nxt = entries[-1].position if entries else max(after, first - 1)
        return LogPage(entries, nxt, nxt < rec.last, task, first)

    def wake(self, task_id: str) -> None:
        rec = self._tasks.get(task_id)
        if rec is not None:
            rec.wake()

    def ended_json(self, task_id: str) -> bytes | None:
        rec = self._tasks.get(task_id)
        if rec is None or rec.ended is None:
            return None
        return rec.ended.snapshot_json()

    def pin(self, task_id: str) -> None:
        rec = self._tasks.get(task_id)
        if rec is not None:
            rec.pins += 1

    def unpin(self, task_id: str) -> None:
        rec = self._tasks.get(task_id)
        if rec is not None:
            rec.pins -= 1
            self._unpinned(rec)

    def _unpinned(self, rec: TaskRecord, reading: str = "") -> None:
        """The eviction a pin held off, once the task's last pin is gone.

        Why: an ended task its readers pinned is skipped by the eviction pass of its own end,
        and the next pass came only with the next task end. After a burst, no task ends: the
        pinned tail stayed over ``max_ended_bytes`` for good (100 blocking sends ending
        together, 3.2 MiB each: 17 tasks of 6.4 MB kept under a 32 MiB budget, where 5 fit).
        """
        if rec.pins == 0 and rec.task is None and self._ended:
            self._evict(next(reversed(self._ended)), reading)

    async def wait(self, task_id: str, after: int) -> None:
        rec = self._record(task_id)
        if rec.last > after:
            return
        if rec.task is None:
            # Ended: nothing more will be appended; this returns when the task is evicted.
            await rec.changes()
            return
        # Waiting on a running task pins it once it ends, until this waiter has resumed: its
        # next read (no checkpoint in between) must still find the task.
        rec.pins += 1
        try:
            await rec.changes()
        finally:
            rec.pins -= 1
            self._unpinned(rec, reading=task_id)  # (this one is read next: kept till a pass)

    async def list_tasks(self, request: ListTasksRequest, *, owner: str | None = None) -> TaskPage:
        size, before = page_bounds(request)
        matched: list[TaskRecord] = []
        for rec in reversed(self._tasks.values()):
            if owner is not None and rec.owner != owner:
                continue
            if request.context_id is not None and rec.context_id != request.context_id:
                continue
            if request.status is not None and rec.state != request.status:
                continue
            if (
                request.status_timestamp_after is not None
                and (rec.timestamp or "") < request.status_timestamp_after
            ):
                continue
            matched.append(rec)
        page = [r for r in matched if before is None or r.seq < before][:size]
        more = bool(page) and matched[-1].seq < page[-1].seq
        token = str(page[-1].seq) if more else ""
        return TaskPage([r.snapshot() for r in page], token, len(matched), size)

    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        rec = self._record(task_id)
        assert config.id is not None
        if rec.push is None:
            rec.push = {}
        rec.push[config.id] = config

    async def push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]:
        return list((self._record(task_id).push or {}).values())

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        push = self._record(task_id).push
        return push is not None and push.pop(config_id, None) is not None


__all__ = [
    "DEFAULT_MAX_ENDED_BYTES",
    "ENDED_EVENT_OVERHEAD",
    "ENDED_TASK_OVERHEAD",
    "MemoryTaskStore",
    "TaskArtifactUpdateEvent",
    "TaskStatusUpdateEvent",
]
