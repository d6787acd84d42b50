"""What the SQLite store holds in memory of a task (:class:`Record`) (no I/O). Its log's
encodings are shared with the other stores: ``store/records.py``."""

from __future__ import annotations

from collections import deque

import anyio

from ...protocol.types import Task
from ..base import LogEntry
from ..records import copy_task

MEMORY_EVENTS = 1024  # log entries kept in memory per running task (older ones: from the file)

SNAP_EVERY = 64
"""A running task's snapshot is written to the file every this many events (and at its end);
loading folds the events after it (recovery.py). Writing it at every event would cost a
stream's artifact chunks quadratic bytes."""


class Record:
    """A task held in memory. ``work``/``wlast``/``wsnap_pos``: as decided by the writes handed
    to the writer (ahead of the file while they wait for their commit); ``view``/``last``/
    ``events``/``snap_pos``: as committed, which is all readers ever see."""

    __slots__ = ("changed", "context_id", "cost", "ended", "events", "id", "last", "lost",
                 "owner", "poisoned", "seq", "size", "snap_len", "snap_pos", "view", "wlast",
                 "work", "wsnap_pos")

    def __init__(self, seq: int, task_id: str, owner: str, context_id: str, work: Task,
                 view: Task, last: int, snap_pos: int, size: int) -> None:
        self.seq, self.id, self.owner, self.context_id = seq, task_id, owner, context_id
        self.work, self.wlast, self.wsnap_pos = work, last, snap_pos
        self.view, self.last, self.snap_pos = view, last, snap_pos
        self.size = size  # about the bytes it takes in the file (retention counts it)
        self.events: deque[LogEntry] = deque(maxlen=MEMORY_EVENTS)
        self.changed: anyio.Event | None = None
        self.ended = False
        self.poisoned: str | None = None  # queued events of it were lost (a failed commit)
        self.lost: str | None = None  # the same, kept until its end (which cannot complete it)
        self.snap_len = 0  # the length of its last snapshot's JSON (what it costs in memory)
        self.cost = 0  # the bytes counted for it while it is among the recently ended

    def snapshot(self) -> Task:
        """The committed snapshot (shared: do not change it; encode it before an await)."""
        return self.view

    def wake(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    def undo(self, why: str) -> None:
        """Back to what is committed (a batch failed because ``why``); the run learns at its
        next append (``poisoned``). If artifacts were among what is lost, its end cannot say
        it completed (``lost``, kept until then): lost status updates leave the answer whole."""
        cause = why.split(";")[0].strip().rstrip(".")  # the cause; the rest is other advice
        if self.work.artifacts != self.view.artifacts:
            self.lost = f"the task store could not write some of this task's artifacts: {cause}"
        self.work, self.wlast, self.wsnap_pos = copy_task(self.view), self.last, self.snap_pos
        self.poisoned = f"the task store could not write this task's latest events: {cause}"
