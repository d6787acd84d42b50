"""Appends to the Redis store's task logs: folded here, checked and stored by one script each
(:data:`.scripts.APPEND`), sent in batches (:mod:`.batch`).

Two ways. An append that ends a turn (a terminal or interrupted status), an append of a run
under a queue lease (a stale worker is refused at once), and any append to a task this process
does not hold the latest state of, is *waited for*: it returns once Redis
has stored it (a blocking send is answered only then). The other events of a run executing
here (artifacts, working statuses, trajectory events) are *pushed*, as the SQLite store pushes
them: the position and the fold are decided here, in order, the call joins the next batch, and
the run goes on without waiting for the round trip (it yields at its first event of a batch
and every :data:`YIELD_EVERY`-th, so others run meanwhile).
A pushed event is published (held for this process's readers, announced to the others) only
once Redis has stored it, so nothing is shown that is not stored; and it is stored before any
later append of its task (the batches run in order, and every append names the position it
expects to follow).

A run's pushed events that wait for the same batch go in one call (:class:`_Gathered`): one
check of the task, one write of its hash, and one snapshot, encoded as the batch is sent, for
all of them (a stream's events used to cost a snapshot's JSON and a script call each; the
snapshot after each but the last is never read by anyone, as the call is atomic). An append
that is waited for closes the gathering of its task first. At most
:data:`MAX_PUSHED` pushed appends (and :data:`MAX_PUSHED_BYTES`) wait for their batch; beyond
that the run waits as well.

A pushed append that Redis refuses (the task ended meanwhile, its lease went to another
worker) or that fails (Redis unreachable) is not lost silently: the run hears of it at its
next append of anything but an end (TaskEnded, or ServerUnavailable saying its events were
not stored), so it stops or fails; its end is recorded on top of what Redis holds (the state
here is dropped and read again). Such a run's readers never saw the events that failed.

Cancellation: a waited append either happened or not (a resend is recognised by its op id);
a pushed one returns without awaiting. Errors: ServerUnavailable when Redis is unreachable.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from functools import partial
from typing import Any, Protocol

import anyio
import msgspec

from ...protocol.errors import ServerUnavailable, TaskNotFound
from ...protocol.ids import new_id
from ...protocol.trajectory import LogEvent, TrajectoryEvent
from ...protocol.types import (
    Task,
    TaskStatusUpdateEvent,
)
from ..base import LogEntry, TaskEnded
from ..records import KIND_OF as RECORD_KINDS
from ..snapshot import apply_event
from . import scripts
from .connection import RedisConnection
from .keys import Keys

_encode = msgspec.json.Encoder().encode
# A stream entry keeps its event's kind (records.py) as a one-byte string.
KIND_OF: dict[type[Any], bytes] = {t: bytes((k,)) for t, k in RECORD_KINDS.items()}
CACHE_SIZE = 1024  # tasks whose latest state this process holds, to skip a read per append
MAX_PUSHED = 4096
"""Pushed appends waiting for their batch, at most (then runs wait for theirs)."""
MAX_GATHERED = 256
"""Events in one call, at most (a longer burst goes in several: one script call, however many
events it carries, holds Redis for its whole run)."""
YIELD_EVERY = 32
"""A run pushing events yields to the others at its first event of a batch and every this many
after it (the memory store's appends never yield)."""
MAX_PUSHED_BYTES = 8 << 20
"""Bytes (events and snapshots) of the pushed appends waiting for their batch, at most."""


class _Store(Protocol):
    """What the writer needs of its :class:`.store.RedisTaskStore`."""

    conn: RedisConnection
    keys: Keys
    max_events_per_task: int
    ended_ttl: float
    max_ended_tasks: int
    claim_keep_ms: int

    async def get(self, task_id: str) -> tuple[Task, int]: ...


class LogWriter:
    """The append path of one :class:`.store.RedisTaskStore` (see the module docstring)."""

    def __init__(self, store: _Store) -> None:
        self.store = store
        self._gathering: dict[str, _Gathered] = {}  # task id -> its pushed events not yet sent
        self._sent: dict[str, _Gathered] = {}  # task id -> its last pushed call sent, unanswered
        self.conn = store.conn
        self.keys = store.keys
        self._script = store.conn.script(scripts.APPEND)
        self.cache: OrderedDict[str, tuple[Task, int]] = OrderedDict()
        """Task id -> (its state after the last append decided here, that position)."""
        self.fences: dict[str, str] = {}
        self.ended: OrderedDict[str, bytes] = OrderedDict()  # snapshots of ends written here
        self._failed: OrderedDict[str, Exception] = OrderedDict()  # pushed appends that failed
        self.pushed = 0
        """Pushed appends waiting for their batch."""
        self.pushed_bytes = 0

    def remember(self, task_id: str, task: Task, pos: int) -> None:
        self.cache[task_id] = (task, pos)
        self.cache.move_to_end(task_id)
        if len(self.cache) > CACHE_SIZE:
            self.cache.popitem(last=False)

    async def append(self, task_id: str, event: LogEvent) -> int:
        waited = isinstance(event, TaskStatusUpdateEvent) and (
            event.status.state.terminal or event.status.state.interrupted)
        failed = self._failed.pop(task_id, None)
        if failed is not None and not (isinstance(event, TaskStatusUpdateEvent)
                                       and event.status.state.terminal):
            raise failed  # an event pushed before this one was not stored (an end still is)
        encoded = _encode(event)
        entry = LogEntry(0, event, encoded)
        cached = self.cache.get(task_id)
        if (cached is not None and not waited and task_id not in self.fences
                and self.pushed < MAX_PUSHED
                and self.pushed_bytes < MAX_PUSHED_BYTES):
            gathered = self._gathering.get(task_id)
            if gathered is None or len(gathered.entries) % YIELD_EVERY == 0:
                # Others run before this event is folded: a run must not hold the loop for
                # thousands of them. Not at every event: a run's next events then join the
                # same call, and its readers wake once for all of them (each yield let the
                # batch go with a few events, and woke the readers and wrote the stream for
                # those few). A cancel lands here, before the event is queued (then it did
                # not happen), not after.
                await anyio.lowlevel.checkpoint()
                cached = self.cache.get(task_id)  # (read again: another append may have run)
            if cached is not None and task_id not in self._failed:
                self._push(task_id, entry, *cached)
                return entry.position
        return await self._append(task_id, entry)

    def _push(self, task_id: str, entry: LogEntry, task: Task, last: int) -> None:
        gathered = self._gathering.get(task_id)
        joins = (gathered is not None and gathered.task is task and gathered.last == last
                 and len(gathered.entries) < MAX_GATHERED)
        if gathered is not None and not joins:
            self._close(gathered)  # (before the fold below: its snapshot is the task before)
        changed = not isinstance(entry.event, TrajectoryEvent)
        if changed:
            apply_event(task, entry.event)  # (encoded once for all of the call, as it is sent)
        entry.position = last + 1
        self.remember(task_id, task, entry.position)
        self.pushed += 1
        self.pushed_bytes += len(entry.encoded)
        if gathered is not None and joins:
            gathered.add(entry, changed)
            return
        gathered = self._gathering[task_id] = _Gathered(task_id, task, last)
        gathered.add(entry, changed)
        self.conn.batcher.defer(self._script, partial(self._close, gathered),
                                partial(self._pushed, gathered))

    def verifies(self, task_id: str) -> bool:
        """Whether a write of ``task_id`` by this process is yet to be answered, sent after its
        task's subscription was confirmed (or yet to be sent: the write's reply then tells the
        waiters its position for sure, :mod:`.local`, and wakes them, stored or refused)."""
        confirmed = self.conn.confirmed_at(task_id)
        if confirmed is None:
            return False
        if task_id in self._gathering:
            return True  # (its tick is taken as it is sent: after the confirmation)
        sent = self._sent.get(task_id)
        return sent is not None and sent.tick > confirmed

    def _close(self, gathered: _Gathered) -> tuple[list[str], list[Any]]:
        """The call storing ``gathered`` (made once, when its batch is sent or an append that
        is waited for comes: nothing joins it afterwards)."""
        if gathered.call is None:
            if self._gathering.get(gathered.task_id) is gathered:
                del self._gathering[gathered.task_id]
            snap = _encode(gathered.task) if gathered.changed else b""
            gathered.snap = snap
            self.pushed_bytes += len(snap)
            gathered.size += len(snap)
            entries = gathered.entries
            keys, args = self._call(gathered.task_id, entries[0], snap, gathered.task,
                                    entries[0].position - 1)
            for entry in entries[1:]:
                args += (KIND_OF[type(entry.event)], entry.encoded)
            gathered.tick = self.conn.tick()
            gathered.call = keys, args
            self._sent[gathered.task_id] = gathered
        return gathered.call

    def _pushed(self, gathered: _Gathered, reply: Any, error: Exception | None) -> None:
        """A pushed call's batch returned: publish its events here, or keep its failure for
        the run."""
        task_id = gathered.task_id
        if self._gathering.get(task_id) is gathered:  # failed unsent (the store closed)
            del self._gathering[task_id]
        if self._sent.get(task_id) is gathered:
            del self._sent[task_id]
        self.pushed -= len(gathered.entries)
        self.pushed_bytes -= gathered.size
        if error is None and reply[0] in (1, 2):
            self.conn.local.appended(task_id, gathered.entries, gathered.snap, gathered.tick)
        else:
            if error is None:
                code = reply[0]
                error = TaskNotFound(f"task {task_id!r} not found") if code == -1 else (
                    TaskEnded(task_id) if code in (-2, -4) else ServerUnavailable(
                        f"events of task {task_id!r} were not stored (another process wrote "
                        "to it); try again"))
            elif isinstance(error, ServerUnavailable):
                error = ServerUnavailable(f"events of task {task_id!r} were not stored: {error}")
            self.cache.pop(task_id, None)  # what Redis holds is read again
            if task_id not in self._failed:
                self._failed[task_id] = error
                if len(self._failed) > CACHE_SIZE:
                    self._failed.popitem(last=False)
        self.conn.waiters.wake(task_id)

    async def _append(self, task_id: str, entry: LogEntry) -> int:
        """A waited append: stored (or refused) when it returns."""
        event = entry.event
        gathered = self._gathering.get(task_id)
        if gathered is not None:
            self._close(gathered)  # its snapshot is the task before this event
        while True:
            cached = self.cache.pop(task_id, None)
            task, last = cached if cached is not None else await self.store.get(task_id)
            snap = self._fold(task, event)
            keys, args = self._call(task_id, entry, snap, task, last)
            tick = self.conn.tick()
            code, pos = await self.conn.run(self._script, keys, args)
            if code in (1, 2):
                entry.position = int(pos)
                if not task.status.state.terminal:
                    self.remember(task_id, task, entry.position)
                elif snap:
                    self._failed.pop(task_id, None)
                    self.ended[task_id] = snap  # never changes again (store.ended_json)
                    if len(self.ended) > CACHE_SIZE:
                        self.ended.popitem(last=False)
                self.conn.local.appended(task_id, [entry], snap, tick)
                self.conn.waiters.wake(task_id)
                return entry.position
            if code == -3:
                continue  # another writer moved the position: re-read and fold again
            if code == -1:
                raise TaskNotFound(f"task {task_id!r} not found")
            # -2: the task is terminal; -4: our lease went to another worker.
            raise TaskEnded(task_id)

    @staticmethod
    def _fold(task: Task, event: LogEvent) -> bytes:
        """Fold ``event`` into ``task``; the new snapshot (b"": unchanged, a trajectory event)."""
        if isinstance(event, TrajectoryEvent):
            return b""
        apply_event(task, event)
        return _encode(task)

    def _call(self, task_id: str, entry: LogEntry, snap: bytes, task: Task, last: int
              ) -> tuple[list[str], list[Any]]:
        """Keys and arguments of the APPEND of ``entry`` after position ``last``."""
        store, keys = self.store, self.keys
        # A fresh op id per call: a resent batch recognises each of its appends by it.
        return [
            keys.task(task_id), keys.log(task_id), keys.push(task_id), keys.ended, keys.tasks,
            keys.lease(task_id),
        ], [
            last, new_id(), KIND_OF[type(entry.event)], entry.encoded, snap,
            task.status.state.value, task.status.timestamp or "", store.max_events_per_task,
            int(store.ended_ttl * 1000), store.max_ended_tasks, int(time.time() * 1000),
            task_id, self.fences.get(task_id, ""), keys.appended(task_id), keys.base,
            store.claim_keep_ms, "",
        ]


class _Gathered:
    """A run's pushed events waiting for the same batch: one APPEND call stores them all."""

    __slots__ = ("call", "changed", "entries", "last", "size", "snap", "task", "task_id", "tick")

    def __init__(self, task_id: str, task: Task, last: int) -> None:
        self.task_id = task_id
        self.task = task  # the writer's copy, folded as events are added
        self.last = last  # the position of the last event added (the one before: none yet)
        self.entries: list[LogEntry] = []
        self.changed = False  # whether an event changed the snapshot (not only trajectory)
        self.size = 0  # bytes counted in LogWriter.pushed_bytes
        self.snap = b""
        self.tick = 0
        self.call: tuple[list[str], list[Any]] | None = None  # made once (LogWriter._close)

    def add(self, entry: LogEntry, changed: bool) -> None:
        self.entries.append(entry)
        self.last = entry.position
        self.changed |= changed
        self.size += len(entry.encoded)
