"""The SQLite task store's core: tasks in memory and in the file, reads and appends.

Memory and disk. One process owns the file (schema.py's lock), so what it keeps in memory is
the truth for the tasks that can still change: every running task is held as a record (its
snapshot folded as events are accepted, its committed position, its recent log entries), and
reads of running tasks are answered from memory. Ended tasks never change: they are read from
the file (a few recently ended ones stay in memory as well). Every write goes through the
:class:`.writer.Writer`: it is decided in memory when it is handed over (position, fold,
"terminal states never change"), committed in a batch, and only then visible to readers. So a
reader never sees an event that a crash could lose. A create, a task's end and a claim are
answered once committed; a running task's other events are not waited for (the run learns of a
failed commit at its next append: ServerUnavailable). After a crash, an event that was handed
over but not committed is simply not there; the run is run again (detached) or recorded ended
(interactive), see recovery.py.

Snapshots. Each record keeps two folds of its task: ``work`` (every event handed over) and
``view`` (every event committed: what readers get). The file holds the snapshot as of
``snap_pos``, written every SNAP_EVERY events and at the end; loading folds the events after it.

Blocking. No SQLite call runs on the event loop: writes in the writer thread, reads in the
reader thread (its own connection and capacity limiter; WAL lets it read while the writer
writes).

Cancellation: every method is safe to cancel (writer.py: an op either happens completely or
not at all). Errors: ServerUnavailable when the file cannot be written (full disk, ...), with
what to fix.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import msgspec

from ...protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from ...protocol.trajectory import LogEvent, TrajectoryEvent
from ...protocol.types import (
    Task,
    TaskStatusUpdateEvent,
)
from ..base import LogEntry, LogPage, TaskEnded, TaskStore
from ..records import DECODERS, KIND_OF, TRAJECTORY, decode_task
from ..retention import Retention
from ..sealing import Sealer
from ..snapshot import apply_event
from . import claims, retention
from .records import SNAP_EVERY, Record
from .schema import Database
from .writer import Appended, Work, Writer

log = logging.getLogger("scoped_a2a.sqlite")
_encode = msgspec.json.Encoder().encode
CLAIM_KEYS_SLACK = 10_000
"""Claim keys held in memory beyond twice the stored tasks before the set is read again (the
keys of claims retention deleted are dropped then)."""
RECENT_ENDED = 1024  # ended tasks also kept in memory (a blocking send reads its end at once)
RECENT_BYTES = 32 << 20  # ... and about this many bytes of them at most
RECENT_EVENTS = 64  # log entries an ended task keeps in memory (older ones: from the file)
ENDED_POLL = 5.0  # seconds a wait on an ended task lasts (nothing will be appended)


class SQLiteCore(TaskStore):
    """Tasks in one SQLite file, owned by this process (see the module docstring): records,
    reads and appends. :class:`.store.SQLiteTaskStore` adds listing, claims and push configs.
    """

    def __init__(self, db: Database, sealer: Sealer, *, max_events_per_task: int = 10_000,
                 policy: Retention | None = None) -> None:
        if max_events_per_task < 1:
            raise ValueError("store bounds must be positive")
        self.db = db
        self.path = db.path
        self.sealer = sealer
        self.max_events_per_task = max_events_per_task
        self.policy = policy or Retention()
        self.writer = Writer(db.writer, db.path)
        self._read_limiter = anyio.CapacityLimiter(1)
        self.live: dict[str, Record] = {}
        self._recent: OrderedDict[str, Record] = OrderedDict()
        self._recent_bytes = 0
        self.ended_count = 0
        self.ended_bytes = 0
        self._next_age_sweep = 0.0
        self.lease_of: Callable[[str], str | None] = lambda task_id: None
        self._fences: dict[str, str] = {}
        self._pending = claims.Pending()
        self.claim_keys: set[bytes] = set()
        self._keys_added: set[bytes] | None = None  # while the key set is being reloaded
        """Every claim key the file may hold (loaded at start, added to as claims are made;
        keys of deleted claims may stay: then the file is read and says there is none)."""
        self.queue: Any = None  # the run queue (queue.py), set by open_sqlite_store

    def run_launcher(self) -> Any:
        """The run queue: a detached run is stored with its task, and re-run after a crash."""
        return self.queue

    # --- reading ---------------------------------------------------------------------------

    async def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        def run(conn: sqlite3.Connection) -> Any:
            conn.execute("BEGIN")  # one snapshot of the file for the whole read
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")
        try:
            return await anyio.to_thread.run_sync(run, self.db.reader,
                                                  limiter=self._read_limiter)
        except sqlite3.Error as exc:
            raise ServerUnavailable(f"the task store ({self.path}) could not be read: "
                                    f"{exc}") from None

    def _cached(self, task_id: str) -> Record | None:
        rec = self.live.get(task_id)
        return rec if rec is not None else self._recent.get(task_id)

    async def _row(self, task_id: str) -> Record:
        """The task as a record: from memory, or read from the file (ended tasks)."""
        rec = self._cached(task_id)
        if rec is not None:
            return rec
        row = await self._read(lambda c: c.execute(
            "SELECT seq, owner, context_id, snap, last FROM tasks WHERE id = ?",
            (task_id,)).fetchone())
        if row is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        seq, owner, context_id, snap, last = row
        rec = self._cached(task_id)  # (it may have been created or ended meanwhile)
        if rec is not None:
            return rec
        task = decode_task(snap)  # an ended task's snapshot is written at its end
        rec = Record(seq, task_id, owner, context_id, task, task, last, last, 0)
        rec.snap_len = len(snap)
        rec.ended = True
        self._remember(rec)
        return rec

    def _remember(self, rec: Record) -> None:
        """Keep the ended ``rec`` among the recently ended (a few of its last entries), within
        RECENT_ENDED tasks and about RECENT_BYTES."""
        while len(rec.events) > RECENT_EVENTS:
            rec.events.popleft()
        if rec.id in self._recent:
            self._recent.move_to_end(rec.id)
            return
        # The snapshot twice (the object tree costs more than its JSON), plus the entries.
        rec.cost = 2 * rec.snap_len + sum(len(e.encoded) for e in rec.events)
        self._recent[rec.id] = rec
        self._recent_bytes += rec.cost
        while self._recent and (len(self._recent) > RECENT_ENDED
                                or self._recent_bytes > RECENT_BYTES) \
                and next(iter(self._recent)) != rec.id:
            _, old = self._recent.popitem(last=False)
            self._recent_bytes -= old.cost

    def _forget(self, task_id: str) -> Record | None:
        rec = self._recent.pop(task_id, None)
        if rec is not None:
            self._recent_bytes -= rec.cost
        return rec

    async def owner_of(self, task_id: str) -> str:
        return (await self._row(task_id)).owner

    async def get(self, task_id: str) -> tuple[Task, int]:
        rec = await self._row(task_id)
        return rec.snapshot(), rec.last

    async def read(
        self, task_id: str, after: int, *, max_events: int = 1000, max_bytes: int = 1 << 20
    ) -> LogPage:
        rec = await self._row(task_id)
        max_events = max(1, max_events)
        last, task = rec.last, rec.snapshot()
        first = max(1, last - self.max_events_per_task + 1)
        start = max(after + 1, first)
        held = rec.events
        raw: list[tuple[int, int, bytes]]
        if start > last:
            entries: list[LogEntry] = []
        elif held and held[0].position <= start:
            entries = []
            size = 0
            for i in range(start - held[0].position, len(held)):
                entry = held[i]
                size += len(entry.encoded)
                # The first entry is always returned, whatever its size.
                if entries and (len(entries) >= max_events or size > max_bytes):
                    break
                entries.append(entry)
        else:
            seq = rec.seq
            raw = await self._read(lambda c: c.execute(
                "SELECT pos, kind, body FROM events WHERE task = ? AND pos >= ? AND pos <= ? "
                "ORDER BY pos LIMIT ?", (seq, start, last, max_events)).fetchall())
            entries, size = [], 0
            for pos, kind, body in raw:
                size += len(body)
                if entries and size > max_bytes:
                    break
                body = bytes(body)
                entries.append(LogEntry(pos, DECODERS[kind].decode(body), body))
        nxt = entries[-1].position if entries else max(after, first - 1)
        return LogPage(entries, nxt, nxt < last, task, first)

    def wake(self, task_id: str) -> None:
        rec = self.live.get(task_id)
        if rec is not None:
            rec.wake()

    async def wait(self, task_id: str, after: int) -> None:
        rec = self.live.get(task_id)
        if rec is None:
            rec = await self._row(task_id)
            if rec.last > after or not rec.ended:
                return
            await anyio.sleep(ENDED_POLL)  # ended: nothing more will come; re-read now and then
            return
        if rec.last > after:
            return
        if rec.changed is None:
            rec.changed = anyio.Event()
        await rec.changed.wait()

    # --- writing ---------------------------------------------------------------------------

    def create_work(self, task: Task, owner: str,
                    extra: Callable[[sqlite3.Connection], None] | None = None,
                    then: Callable[[], None] | None = None) -> Work:
        """The op that stores ``task`` (``extra``: more SQL in the same transaction, ``then``:
        run once it is committed). The run queue adds its entry this way. InvalidParams if the
        id is taken."""
        if task.id in self.live or task.id in self._recent:
            raise InvalidParams(f"task {task.id!r} already exists")
        snap = _encode(task)
        row = (task.id, owner, task.context_id, task.status.state.value,
               task.status.timestamp, snap, len(snap))
        made = self._pending.rows_of(task.id)  # its message claims are made with it

        def run(conn: sqlite3.Connection) -> int:
            cur = conn.execute("INSERT INTO tasks (id, owner, context_id, state, ts, last, "
                               "snap, ended_at, size, snap_pos) "
                               "VALUES (?, ?, ?, ?, ?, 0, ?, NULL, ?, 0)", row)
            if made:
                claims.write_made(conn, made)
            if extra is not None:
                extra(conn)
            return int(cur.lastrowid or 0)

        def done(seq: int) -> None:
            for key, *_ in made:
                self._pending.drop(key)
                self.note_claim(key)
            self.live[task.id] = Record(seq, task.id, owner, task.context_id, task,
                                        decode_task(snap), 0, 0, len(snap))
            if then is not None:
                then()

        return Work(run, done)

    async def create(self, task: Task, *, owner: str = "") -> None:
        await self.write(self.create_work(task, owner))

    async def write(self, work: Work) -> Any:
        """Commit one op; an IntegrityError (a task id taken) is the caller's InvalidParams."""
        try:
            return await self.writer.write(work)
        except sqlite3.IntegrityError:
            raise InvalidParams("a task with this id already exists") from None

    def lost_events(self, task_id: str) -> str | None:
        rec = self.live.get(task_id)
        return rec.lost if rec is not None else None

    @contextmanager
    def fenced(self, task_id: str, token: str) -> Iterator[None]:
        """While in the body, appends to ``task_id`` need the run queue's lease ``token``."""
        self._fences[task_id] = token
        try:
            yield
        finally:
            self._fences.pop(task_id, None)

    async def append(self, task_id: str, event: LogEvent) -> int:
        # Encoded first: an event JSON cannot encode is refused before it takes a position.
        encoded = _encode(event)
        kind = KIND_OF[type(event)]
        rec = self.live.get(task_id)
        if rec is None:
            await self._row(task_id)  # TaskNotFound if it does not exist
            raise TaskEnded(task_id)
        ends = isinstance(event, TaskStatusUpdateEvent) and event.status.state.terminal
        if rec.poisoned is not None and not ends:
            text, rec.poisoned = rec.poisoned, None
            raise ServerUnavailable(text)
        if rec.work.status.state.terminal:
            raise TaskEnded(task_id)
        fence = self._fences.get(task_id)
        if fence is not None and self.lease_of(task_id) != fence:
            raise TaskEnded(task_id)  # our lease went elsewhere: record nothing
        # Decided now, in order: the position, the fold, whether the snapshot is written.
        pos = rec.wlast + 1
        status_changed = not isinstance(event, TrajectoryEvent)
        if status_changed:
            apply_event(rec.work, event)
        rec.wlast = pos
        status = rec.work.status
        ended_at = time.time() if ends else None
        snap: bytes | None = None
        if ends or pos - rec.wsnap_pos >= min(SNAP_EVERY, self.max_events_per_task):
            snap = _encode(rec.work)
            rec.wsnap_pos = pos
        grow = len(encoded) + (len(snap) if snap is not None else 0)
        row = Appended(rec.seq, pos, kind, encoded, grow, snap=snap,
                       trim=max(pos - self.max_events_per_task, 0), rec=rec, event=event,
                       ends=ends)
        if isinstance(event, TaskStatusUpdateEvent):
            row.state, row.ts, row.ended_at = status.state.value, status.timestamp, ended_at
        # One bound method for every append (no closure per event: a stream makes many).
        work = Work(None, self._publish, rec.undo, refusable=False, append=row)
        if not ends and self.writer.has_room:
            # Published (to readers) at its commit; the run need not wait for the disk.
            self.writer.push(work)
            return pos
        # An end is acknowledged only once stored (the queue retires a run on it).
        await self.writer.write(work)
        if ends:
            try:
                await self._retain(keep=task_id)
            except ServerUnavailable as exc:  # the end is stored; retention tries again later
                log.warning("SQLite store retention failed: %s", exc)
        return pos

    def _publish(self, row: Appended) -> int:
        """An appended event is committed: readers see it from now on; its position."""
        rec: Record = row.rec
        rec.last = row.pos
        rec.size += row.grow
        if row.kind != TRAJECTORY:
            apply_event(rec.view, row.event)
        if row.snap is not None:
            rec.snap_pos, rec.snap_len = row.pos, len(row.snap)
        rec.events.append(LogEntry(row.pos, row.event, row.body))
        if row.ends:
            self._ended(rec)
        rec.wake()
        return row.pos

    def _ended(self, rec: Record) -> None:
        rec.ended = True
        self.live.pop(rec.id, None)
        self._remember(rec)
        self.ended_count += 1
        self.ended_bytes += rec.size

    def note_claim(self, key: bytes) -> None:
        """The file holds (or is about to hold) a claim of ``key``."""
        self.claim_keys.add(key)
        if self._keys_added is not None:
            self._keys_added.add(key)

    async def _reload_claim_keys(self) -> None:
        """Drop the keys of claims retention deleted: read the file's keys again, plus those
        noted while it was read (its read may not see them), so no key it holds is missed."""
        self._keys_added = set()
        try:
            fresh: set[bytes] = await self._read(
                lambda c: {bytes(k) for (k,) in c.execute("SELECT key FROM claims")})
            self.claim_keys = fresh | self._keys_added
        finally:
            self._keys_added = None

    async def _retain(self, keep: str | None = None) -> None:
        """Delete ended tasks beyond the retention policy (one op in the writer's batch)."""
        policy = self.policy
        now = time.monotonic()
        by_age = policy.retain is not None and now >= self._next_age_sweep
        if not by_age and self.ended_count <= policy.max_ended_tasks \
                and self.ended_bytes <= policy.max_ended_bytes:
            return
        if by_age:
            assert policy.retain is not None
            self._next_age_sweep = now + min(max(policy.retain / 10, 0.05), 60.0)

        count, size = self.ended_count, self.ended_bytes

        def done(gone: list[tuple[str, int]]) -> None:
            for task_id, task_size in gone:
                self.ended_count -= 1
                self.ended_bytes -= task_size
                rec = self._forget(task_id)
                if rec is not None:
                    rec.wake()
            self.ended_count = max(self.ended_count, 0)
            self.ended_bytes = max(self.ended_bytes, 0)

        await self.writer.write(
            Work(lambda c: retention.sweep(c, policy, count, size, keep), done))
        if len(self.claim_keys) > CLAIM_KEYS_SLACK + 2 * (self.ended_count + len(self.live)):
            await self._reload_claim_keys()

    async def aclose(self) -> None:
        """Close the file (checkpointing its WAL) and release its lock."""
        with anyio.CancelScope(shield=True):
            await self.writer.call(lambda _: self.db.close())
