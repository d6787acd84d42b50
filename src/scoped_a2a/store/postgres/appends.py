"""Appends in PostgreSQL: a running task's intermediate events, many tasks per statement.

Most events a task appends (artifact chunks, trajectory events, status updates short of the
end) change only its row's position, state and size and add one event row. Those go through
:class:`Batcher`: one writer task takes every queued event (the first of each task) and writes
them in one statement (one round trip, one implicit transaction, one commit); events queued
meanwhile go in the next. So 16 streams cost about one round trip per 16 events or more.

What waits, as in the SQLite store (store/sqlite/core.py). A running task's artifact chunks,
trajectory events and ``working`` updates are not waited for: the position is decided when the
event is handed over (this process tracks each task it writes: its position and snapshot
position, learned from its create or its last written event), and the statement writes it
only at that position (``expect``). Readers see an event only once committed: this process's
readers are woken, the snapshot after the task's events held and its recent entries kept by
:meth:`Batcher.run` after the commit; other replicas hear the ``NOTIFY`` sent in the same
transaction. If the write fails
(the database is gone, the task ended, the run lost its queue lease, another process wrote the
task), the run learns at its next append (ServerUnavailable or TaskEnded). Every other event
(another status, any event of a task not tracked here, all of them with
``--postgres-sync-events``) is waited for: its append returns once committed. A task's end
and whatever the statement skipped take the full path (core.py) once the task's queued events
are written, so a send is answered only once everything it stored is committed. The
statements: append_sql.py.

Snapshots. The writer folds each task's events into the snapshot this process holds before it
writes them (:func:`..snapshot.folded`: what they change copied once per batch, then folded in
place), and when the task's snapshot is due (``every`` events since the stored one) the same
statement stores it, at the task's last event of the batch. Before, the event at which it fell
due took the full path: the run waited for its queued events, then for a statement of its own.

The UPDATE takes each task's row lock, so appends to one task from any replica are serialized;
a deadlock between two replicas' batches (each locking tasks the other wants) is retried.

The writer also sends the notifications of synchronous commits (a task's end), which must not
be in those commits (core.py): all queued ones with the next batch's statement, or in one of
their own when nothing else is queued; nobody waits for them.

Cancellation: the writer runs each statement to its commit (connection.py); :meth:`flush`
(before the store closes) waits for the queue to empty. A waiting caller cancelled before its
event was taken takes it out. Errors: as said above.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import msgspec
from psycopg import errors as pgerrors

from ...protocol.errors import ServerUnavailable
from ...protocol.types import Task, TaskStatus
from ..base import LogEntry, TaskEnded
from ..snapshot import folded
from .append_sql import BATCH, KNOWN, TERMINAL_SQL, WRITE, full_update
from .batch_items import Item, parameters, take
from .connection import Conn, Pool

__all__ = ["KNOWN", "TERMINAL_SQL", "WRITE", "Batcher", "full_update"]  # core.py's

MAX_BATCH = 128
"""Events written by one statement at most."""
MAX_GROUP = 1024
"""Events of one task written by one statement at most (and never more than the log's cap:
the statement's trim does not see the events it inserts)."""
MAX_TRACKED = 4096
"""Tasks whose positions this process tracks (those written most recently)."""

_encode = msgspec.json.Encoder().encode


OnCommit = Callable[[str, int, list[LogEntry], Task | None], None]
"""(task id, first position, entries, the snapshot after them or None) once committed."""
Fold = Callable[[str, int, list[LogEntry]], Task | None]
"""The snapshot after entries from a position on, from the one held before it (None: none)."""
Load = Callable[[str], Awaitable[tuple[Task, int]]]
"""The task's snapshot and position as the database has them."""


class _Track:
    """What this process knows of a task it writes."""

    __slots__ = ("error", "idle", "owned", "pos", "queued", "snap_pos")

    def __init__(self, pos: int | None, snap_pos: int, owned: bool) -> None:
        self.owned = owned  # this process runs the task: its events need not be waited for
        self.pos = pos  # the last position handed over (None: not known: ask the database)
        self.snap_pos = snap_pos
        self.queued = 0  # events queued or being written
        self.idle: anyio.Event | None = None  # set when queued drops to 0
        self.error: BaseException | None = None  # a write that failed, for the next append


class Batcher:
    """Intermediate events of running tasks, written many tasks per statement."""

    def __init__(self, pool: Pool, channel: str, limit: int, every: int, sync: bool,
                 on_commit: OnCommit, fold: Fold, load: Load) -> None:
        self.pool = pool
        self.channel = channel
        self.every = every  # a snapshot is due this many events after the last one
        self.group = min(MAX_GROUP, limit)  # events of one task per statement, at most
        self.commit = "on" if sync else "off"
        self.on_commit = on_commit
        self.fold = fold
        self.load = load
        self.terminal = TERMINAL_SQL
        self.sql = BATCH.format(terminal=self.terminal, every=int(every), limit=int(limit))
        self._queue: deque[Item] = deque()
        self._notes: list[str] = []  # notifications of synchronous commits, to send
        self._tracks: OrderedDict[str, _Track] = OrderedDict()
        self._wake = anyio.Event()
        self._woken = False  # _wake is set (or the writer has not waited since)
        self._idle = anyio.Event()
        self._idle.set()

    # --- what this process knows ----------------------------------------------------------

    def own(self, task_id: str, pos: int | None, snap_pos: int = 0) -> None:
        """This process runs ``task_id`` (an interactive run created here, or a queued run
        under its lease): its events need not be waited for once its position is known
        (``pos``, or learned from its first waited event)."""
        t = self._tracks.get(task_id)
        if t is None:
            self._tracks[task_id] = _Track(pos, snap_pos, True)
            if len(self._tracks) > MAX_TRACKED:
                for old, ot in list(self._tracks.items())[:len(self._tracks) - MAX_TRACKED]:
                    if ot.queued == 0:
                        del self._tracks[old]
        elif t.queued == 0:
            t.pos, t.snap_pos, t.owned = pos, snap_pos, True
        self._tracks.move_to_end(task_id)

    def track(self, task_id: str, pos: int, snap_pos: int) -> None:
        """A full-path append committed ``task_id`` at ``pos`` (snapshot at ``snap_pos``)."""
        t = self._tracks.get(task_id)
        if t is not None and t.owned and t.queued == 0:
            t.pos, t.snap_pos = pos, snap_pos

    def last_here(self, task_id: str) -> int | None:
        """The last position this process handed over for ``task_id``, a task it runs (the
        writer of its positions: :meth:`own`); None when it does not run it or does not know."""
        t = self._tracks.get(task_id)
        return t.pos if t is not None and t.owned else None

    def forget(self, task_id: str) -> None:
        """Positions of ``task_id`` are to be learned from the database again."""
        t = self._tracks.get(task_id)
        if t is not None:
            if t.queued:
                t.pos = None
            else:
                del self._tracks[task_id]

    async def drain(self, task_id: str) -> None:
        """Once every queued event of ``task_id`` is written; raises what failed."""
        t = self._tracks.get(task_id)
        while t is not None and t.queued:
            if t.idle is None:
                t.idle = anyio.Event()
            await t.idle.wait()
        self.check(task_id)

    def check(self, task_id: str) -> None:
        """Raise (once) the failure of a write this task's run did not wait for."""
        t = self._tracks.get(task_id)
        if t is not None and t.error is not None:
            error, t.error = t.error, None
            if not t.queued:
                t.pos = None  # the next event is waited for, and its position learned
            raise error

    # --- appends --------------------------------------------------------------------------

    def put(self, task_id: str, kind: int, entry: LogEntry, status: TaskStatus | None,
            token: str | None, wait: bool, heard: int) -> int | Item:
        """Queue an event (``entry``, whose position is set here or once written). Returns
        its position at once if it is known and ``wait`` is false (``heard``: the latest
        position announced; a later one means another process wrote); else the item to
        :meth:`wait_for`. A snapshot falling due needs no full path: the statement writes it
        with the task's events (:meth:`_snapshots`). Not a coroutine: a stream's every event
        comes here, and most return at once."""
        t = self._tracks.get(task_id)
        if t is None:
            t = self._tracks[task_id] = _Track(None, 0, False)
        else:
            if t.error is not None:
                self.check(task_id)
            if t.pos is not None and t.pos < heard and not t.queued:
                t.pos = None  # another process wrote it: learn its position again
        if not t.queued:  # (while some are queued it is not forgotten: moved once)
            self._tracks.move_to_end(task_id)
        expect = None if t.pos is None else t.pos + 1
        if expect is not None:
            t.pos = entry.position = expect
        waited = wait or expect is None
        item = Item(task_id, kind, entry, status, token, expect, waited)
        t.queued += 1
        self._queue.append(item)
        self._busy()
        if not waited:
            assert expect is not None
            return expect
        item.done = anyio.Event()
        return item

    async def wait_for(self, item: Item) -> int | None:
        """Once ``item`` (from :meth:`put`) is committed: its position (None: the statement
        skipped it, take the full path); raises what failed."""
        try:
            assert item.done is not None
            await item.done.wait()
        except BaseException:
            if item in self._queue:  # not taken yet: it will not be written
                self._queue.remove(item)
                self._done(item)
            raise
        if item.error is not None:
            raise item.error
        return item.entry.position or None

    async def append(self, task_id: str, kind: int, entry: LogEntry,
                     status: TaskStatus | None, token: str | None, *, wait: bool,
                     heard: int) -> int | None:
        """:meth:`put`, then :meth:`wait_for` if it did not return the position."""
        got = self.put(task_id, kind, entry, status, token, wait, heard)
        return got if isinstance(got, int) else await self.wait_for(got)

    def notify(self, payload: str) -> None:
        """Send ``payload`` on the channel soon (many in one statement, no caller waiting):
        the notification of a synchronous commit, which must not be in that commit
        (core.py). Lost if the store closes, the database fails first or the batch statement
        carrying it fails: other replicas' waiters re-read within their ``poll_interval``."""
        self._notes.append(payload)
        self._busy()

    def _busy(self) -> None:
        """Something was queued: wake the writer, and :meth:`flush` waits for it."""
        if not self._woken:
            self._woken = True
            self._wake.set()
            if self._idle.is_set():
                self._idle = anyio.Event()

    async def flush(self) -> None:
        """Once nothing is queued or being written."""
        await self._idle.wait()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """The writer: until cancelled, write what is queued, a batch at a time."""
        task_status.started()
        try:
            await self._run()
        finally:  # closing: nothing queued will be written
            for item in list(self._queue):
                self._failed(item, ServerUnavailable("the PostgreSQL store is closing"))
            self._queue.clear()
            self._idle.set()

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._notes:
                    await self._notify(self._notes)
                    self._notes = []
                    continue
                self._idle.set()
                self._wake = anyio.Event()
                self._woken = False
                await self._wake.wait()
                continue
            batch = self._take()
            notes, self._notes = self._notes, []  # they ride on this statement
            try:
                snaps = await self._snapshots(batch)
                rows = await self._write(batch, snaps, notes)
            except pgerrors.DeadlockDetected:
                # Nothing was written: again, in the order handed over.
                self._queue.extendleft(reversed([i for g in batch for i in g]))
                self._notes[:0] = notes
                continue
            except Exception as exc:  # every caller of the batch learns it
                for group in batch:
                    for item in group:
                        self._failed(item, exc)
                continue
            written = {task_id: (int(pos), int(snap)) for task_id, pos, snap, _, _ in rows
                       if task_id is not None}  # (the notes' row has none)
            lost = {g[0].id: g[0].token for g in batch
                    if g[0].id not in written and not g[0].waited}
            why = await self._why(lost) if lost else {}
            for group, (task, _) in zip(batch, snaps, strict=True):
                got = written.get(group[0].id)
                if got is None:
                    for item in group:
                        self._failed(item, why.get(item.id))
                    continue
                last, snap_pos = got
                t = self._tracks.get(group[0].id)
                if t is not None:
                    t.snap_pos = snap_pos
                    if t.pos is None and t.owned and not t.queued - len(group):
                        t.pos = last  # learned: what follows is not waited for
                first = last - len(group) + 1
                entries = []
                for n, item in enumerate(group, start=first):
                    item.entry.position = n
                    entries.append(item.entry)
                if task is None and group[0].expect is None:  # its position is known now
                    task = self.fold(group[0].id, first, entries)
                self.on_commit(group[0].id, first, entries, task)
                for item in group:
                    if item.done is not None:
                        item.done.set()
                if t is not None:
                    t.queued -= len(group)
                    if t.queued == 0 and t.idle is not None:
                        t.idle.set()
                        t.idle = None

    async def _notify(self, notes: list[str]) -> None:
        """Send ``notes`` (no batch to carry them)."""
        # Stores nothing: like a read, it may be tried twice, and its working says nothing
        # of a server failing writes (a full disk: connection.py).
        with contextlib.suppress(Exception):  # the pool logged it (see notify)
            await self.pool.query(
                "SELECT pg_notify(%s, n) FROM unnest(%s::text[]) n, "
                "(SELECT set_config('synchronous_commit', 'off', true)) s",
                (self.channel, notes), retry=True)

    async def _snapshots(self, batch: list[list[Item]]
                         ) -> list[tuple[Task | None, bytes | None]]:
        """Each group's snapshot after its events, folded here before they are written
        (None: its position is not known yet, or no snapshot is held before it), and that
        snapshot encoded where one is due (its last event this far from the last written:
        the statement writes it with the events, where it took a statement and a round trip
        of its own, the run waiting for it). A due snapshot this process does not hold (its
        cache dropped it) is read from the database first; if the task moved meanwhile, the
        statement skips the group (another process wrote it)."""
        out: list[tuple[Task | None, bytes | None]] = []
        for group in batch:
            first = group[0].expect
            if first is None:
                out.append((None, None))
                continue
            task_id = group[0].id
            entries = [item.entry for item in group]
            task = self.fold(task_id, first, entries)
            t = self._tracks.get(task_id)
            due = t is None or first + len(group) - 1 - t.snap_pos >= self.every
            if due and task is None:
                with contextlib.suppress(Exception):  # the statement decides (see above)
                    held, pos = await self.load(task_id)
                    if pos == first - 1:
                        task = folded(held, [entry.event for entry in entries])
            out.append((task, _encode(task) if due and task is not None else None))
        return out

    async def _why(self, lost: dict[str, str | None]) -> dict[str, Exception]:
        """Why events not waited for were not written (rare): the task ended or its run lost
        its queue lease (TaskEnded: ``lost`` maps each task to its run's lease token), or
        another process wrote to it meanwhile."""
        task_ids = list(lost)
        try:
            rows = await self.pool.query(
                f"SELECT id, state IN ({self.terminal}), (SELECT token FROM runs r "
                "WHERE r.task_id = t.id) FROM tasks t WHERE id = ANY(%s)", (task_ids,))
        except ServerUnavailable as exc:
            return dict.fromkeys(task_ids, exc)
        ended = {task_id for task_id, terminal, token in rows
                 if terminal or (lost[task_id] is not None and token != lost[task_id])}
        return {task_id: TaskEnded(task_id) if task_id in ended else ServerUnavailable(
            f"task {task_id!r} was written by another process while this one ran it; "
            "its latest events were not stored") for task_id in task_ids}

    def _failed(self, item: Item, exc: Exception | None) -> None:
        """``item`` was not written: its waiting caller learns why (None: take the full
        path), or the next append of its task does."""
        t = self._tracks.get(item.id)
        if item.expect is not None and t is not None:
            t.pos = None  # what follows it in the queue fails too (a gap is never written)
            if t.error is None and not item.waited:
                t.error = exc or TaskEnded(item.id)
        item.error = exc
        item.entry.position = 0  # not written (a waiting caller takes the full path)
        self._done(item)

    def _done(self, item: Item) -> None:
        if item.done is not None:
            item.done.set()
        t = self._tracks.get(item.id)
        if t is not None:
            t.queued -= 1
            if t.queued == 0 and t.idle is not None:
                t.idle.set()
                t.idle = None

    def _take(self) -> list[list[Item]]:
        """The queued events to write now, by task (:func:`.batch_items.take`)."""
        batch, self._queue = take(self._queue, MAX_BATCH, self.group)
        return batch

    async def _write(self, batch: list[list[Item]],
                     snaps: list[tuple[Task | None, bytes | None]], notes: list[str]
                     ) -> list[Any]:
        tasks, bodies = parameters(batch, snaps)
        args = {"tasks": tasks, "bodies": bodies, "commit": self.commit,
                "channel": self.channel, "notes": notes}

        async def run(conn: Conn) -> list[Any]:
            return await conn.all(self.sql, args)

        return await self.pool.run(run, transaction=False)
