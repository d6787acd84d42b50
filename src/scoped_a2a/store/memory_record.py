"""One task of the in-memory store: its snapshot and log, live while it runs, JSON once ended.

A running task keeps its snapshot and events as objects (streams and appends read them
constantly). :meth:`TaskRecord.freeze` turns an ended task into its encoded snapshot and log
entries (the bytes every reader already used), which :class:`~.memory.MemoryTaskStore` may pack
later; reads then decode what they return, a fresh copy each time. :meth:`TaskRecord.page` is the
one read of either form. Waiters sleep on the record's one event, set and replaced by
:meth:`TaskRecord.wake`.

Nothing here awaits but :meth:`TaskRecord.changes`, whose cancellation leaves the record as it
was. Errors: none of its own; the store checks ids and bounds before calling it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio
import msgspec

from ..protocol.types import Task, TaskPushNotificationConfig
from .base import LogEntry
from .batched import InBatch
from .packed import Frozen, Packed
from .records import DECODERS, KIND_OF, decode_task

_encoder = msgspec.json.Encoder()
# An ended task's log keeps one byte per event saying which type to decode it as (records.py).

COMPACT_ABOVE = 512
"""Encoded JSON longer than this is copied into an exact-size bytes object before it is kept."""


def encode_compact(obj: Any) -> bytes:
    """``obj`` as JSON in a bytes object no larger than it needs to be.

    msgspec returns its growing output buffer as the bytes object, so the allocation behind a
    large result is up to 1.5 times its length (measured with tracemalloc: 1.5 MB behind a 1 MB
    result); a copy holds exactly the bytes, which is what keeping thousands of them needs.
    """
    encoded = _encoder.encode(obj)
    return memoryview(encoded).tobytes() if len(encoded) > COMPACT_ABOVE else encoded


ENDED_TASK_OVERHEAD = 640
"""Bytes counted per ended task on top of what holds its JSON (plain or packed): its record,
ids, index entries (measured with tracemalloc, ids as the server makes them: ~500)."""

ENDED_EVENT_OVERHEAD = 128
"""Bytes counted per kept log event of an ended task not yet packed, on top of its JSON: the
bytes object's header, the allocator's rounding of a small one, its slot in the tuple
(measured: ~110)."""

_NO_EVENTS: deque[LogEntry] = deque(maxlen=0)  # what an ended task has in place of its deque


class TaskRecord:
    """One task. Running: ``task`` and ``events`` hold objects. Ended: ``ended`` holds the
    snapshot and the retained log (positions ``first``..``last``) as JSON, plain or packed."""

    __slots__ = (
        "changed", "context_id", "ended", "events", "first", "last", "owner", "pins", "push",
        "seq", "size", "state", "task", "timestamp",
    )

    def __init__(self, task: Task, seq: int, owner: str = "") -> None:
        self.task: Task | None = task
        self.owner = owner  # the principal id that may see the task ("" = anonymous)
        self.seq = seq  # creation order, for ListTasks paging
        self.events: deque[LogEntry] = deque()
        self.last = 0
        # Created by the first waiter and dropped when set: most tasks are never waited on, and
        # an idle event costs more than a small task's JSON (asyncio.Event keeps a deque).
        self.changed: anyio.Event | None = None
        # Created by the first push config: an empty dict costs more than a packed small task's
        # events.
        self.push: dict[str, TaskPushNotificationConfig] | None = None
        self.pins = 0  # readers waiting since before the task ended (see ``wait``)
        # Filled in when the task ends (``freeze``), packed later (``MemoryTaskStore._pack``).
        self.ended: Frozen | Packed | InBatch | None = None
        self.first = 1
        self.size = 0
        # What ListTasks filters on, kept apart so filtering decodes nothing.
        self.context_id = task.context_id
        self.state = task.status.state
        self.timestamp = task.status.timestamp

    def wake(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    async def changes(self) -> None:
        """Return at the next ``wake`` (an append, or the task's eviction)."""
        if self.changed is None:
            self.changed = anyio.Event()
        await self.changed.wait()

    def snapshot(self) -> Task:
        """The task: the live object while running, a fresh decoded copy once ended."""
        if self.task is not None:
            return self.task
        assert self.ended is not None
        return decode_task(self.ended.snapshot_json())

    def freeze(self) -> int:
        """Drop the object trees of an ended task, keeping its JSON; return the bytes counted."""
        assert self.task is not None
        self.first = self.events[0].position if self.events else self.last + 1
        frozen = Frozen(
            encode_compact(self.task), tuple(e.encoded for e in self.events),
            bytes(KIND_OF[type(e.event)] for e in self.events),
        )
        self.ended = frozen
        self.task = None
        self.events = _NO_EVENTS
        self.size = (
            frozen.raw_size() + ENDED_TASK_OVERHEAD + ENDED_EVENT_OVERHEAD * len(frozen.events)
        )
        return self.size

    def page(self, after: int, max_events: int, max_bytes: int) -> tuple[list[LogEntry], Task]:
        """The log entries a read after ``after`` returns, and the snapshot (see ``read``)."""
        start = max(after + 1, self.first_kept())
        if self.task is not None:
            entries: list[LogEntry] = []
            size = 0
            for position in range(start, self.last + 1):
                entry = self.events[position - self.events[0].position]
                size += len(entry.encoded)
                # The first entry is always returned, whatever its size.
                if entries and (len(entries) >= max_events or size > max_bytes):
                    break
                entries.append(entry)
            return entries, self.task
        ended = self.ended
        assert ended is not None
        lo = start - self.first
        hi, size = lo, 0
        while hi < self.last - self.first + 1:
            size += ended.event_size(hi)
            if hi > lo and (hi - lo >= max_events or size > max_bytes):
                break
            hi += 1
        # One decompression per call (snapshot and the blocks the page covers), none per entry.
        snapshot, events = ended.page(lo, hi)
        kinds = ended.kinds
        return [
            LogEntry(start + k, DECODERS[kinds[lo + k]].decode(js), js)
            for k, js in enumerate(events)
        ], decode_task(snapshot)

    def first_kept(self) -> int:
        if self.task is not None:
            return self.events[0].position if self.events else self.last + 1
        return self.first
