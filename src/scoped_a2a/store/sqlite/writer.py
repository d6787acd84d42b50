"""The one writer of the SQLite store: every write is an op, ops are committed in batches.

Group commit. An op is decided by its caller on the event loop when it is handed over (what to
write, and what it changes in the store's memory once committed: positions and folds are taken
in order of submission), then queued. One loop (:meth:`Writer.run`, a task the store's context
owns) takes every op queued, runs their SQL in one transaction in the writer thread
(``anyio.to_thread.run_sync`` with a capacity limiter of one, so the event loop never waits on
SQLite and the connection is never used by two threads at once), and only after the COMMIT
returns does each op publish what it changed (to readers) and its caller, if it waits, get its
answer. Under load one commit (one fsync) serves many writes. Nothing is visible to readers
before it is on disk.

Waiting. :meth:`Writer.write` waits for the commit (a send's task, an end, a claim: what is
acknowledged must be stored). :meth:`Writer.push` does not (a running task's events: they are
published at their commit, and an agent need not wait for the disk between two of them); past
``max_queued`` ops it waits all the same, so a fast agent cannot queue without bound.

Errors. An op's own refusal (``Refused``, or an ``sqlite3.IntegrityError``) rolls back only that
op (a savepoint) and is raised to its caller. Anything else (a full disk, an I/O error) rolls
back the whole batch; its ops, and every op queued after them (decided on top of them), are
undone in memory and their callers get ``ServerUnavailable`` saying what went wrong; nothing is
half-written.

Cancellation. A caller cancelled while its op is still queued withdraws it if the op changed
nothing in memory and nothing was decided on top of it (it is the last queued); otherwise, and
once its batch is committing, the op happens completely and the cancellation is delivered to the
caller at once.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ...protocol.errors import ServerUnavailable

log = logging.getLogger("scoped_a2a.sqlite")

MAX_QUEUED = 4096
"""Ops queued without their callers waiting, at most (then callers wait for the commit)."""


class Refused(Exception):
    """Raised by an op's SQL to refuse itself (only that op is rolled back)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class Work:
    """What an op does: ``run`` in the writer thread (inside the batch's transaction), then
    ``done`` on the loop after the commit (its return value is the op's answer), or ``undo`` on
    the loop if it did not commit."""

    run: Callable[[sqlite3.Connection], Any] | None
    done: Callable[[Any], Any] | None = None
    undo: Callable[[str], None] | None = None  # given why it did not commit
    refusable: bool = True  # False: ``run`` never refuses (no savepoint needed around it)
    append: Appended | None = None  # an appended event: written with the batch's others


@dataclass(slots=True)
class Appended:
    """One event appended to a task (``seq``), and what it changes in the task's row (None:
    unchanged). A batch writes all of its events with one statement and one row update per
    task, after its other ops."""

    seq: int
    pos: int
    kind: int
    body: bytes
    grow: int
    state: str | None = None
    ts: str | None = None
    ended_at: float | None = None
    snap: bytes | None = None
    trim: int = 0  # the position the log's cap drops (0: none)
    # What the store publishes once it is committed (its op's ``done`` gets this row).
    rec: Any = None
    event: Any = None
    ends: bool = False


class _Item:
    __slots__ = ("error", "finished", "result", "work")

    def __init__(self, work: Work, finished: anyio.Event | None) -> None:
        self.work = work
        self.finished = finished
        self.result: Any = None
        self.error: BaseException | None = None


def failure_text(exc: BaseException, path: object) -> str:
    """What a failed commit tells the caller: what to fix, never internals."""
    text = str(exc)
    if "full" in text:
        return (f"the task store's disk is full ({path}); nothing was accepted: free space "
                "and send again")
    if "readonly" in text or "read-only" in text:
        return f"the task store ({path}) has become read-only; nothing was accepted"
    return f"the task store ({path}) could not write ({text}); nothing was accepted"


def unavailable(exc: BaseException, path: object) -> ServerUnavailable:
    """The caller's error for a failed commit; ``lasting`` when only an operator can clear
    its cause (a full disk, a read-only file), not a lock that frees by itself."""
    error = ServerUnavailable(failure_text(exc, path))
    text = str(exc)
    error.lasting = "full" in text or "readonly" in text or "read-only" in text
    return error


class Writer:
    """Commits ops on one connection, in batches (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection, path: object) -> None:
        self._conn = conn
        self._path = path
        self._limiter = anyio.CapacityLimiter(1)
        self._queued: list[_Item] = []
        self._wake = anyio.Event()
        self._closing = False
        self._running = False
        self.batches = 0
        self.ops = 0

    # --- handing ops over ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing or not self._running:
            raise ServerUnavailable(f"the task store ({self._path}) is closed")

    def push(self, work: Work) -> None:
        """Queue ``work`` without waiting for its commit (the caller checked ``has_room``)."""
        self._check_open()
        self._queued.append(_Item(work, None))
        self._wake.set()

    @property
    def has_room(self) -> bool:
        return len(self._queued) < MAX_QUEUED

    async def write(self, work: Work) -> Any:
        """Queue ``work`` and wait for its commit; return what its ``done`` returned, or raise
        its refusal."""
        self._check_open()
        item = _Item(work, anyio.Event())
        self._queued.append(item)
        self._wake.set()
        assert item.finished is not None
        try:
            await item.finished.wait()
        except BaseException:
            # Withdrawn only if it changed nothing in memory and nothing was decided on top of
            # it; else it happens anyway.
            if work.undo is None and self._queued and self._queued[-1] is item:
                self._queued.pop()
            raise
        error = item.error
        if error is not None:
            # Raised, not kept: its traceback holds this frame, and the frame (``item``, or a
            # local) holding it again would be a cycle only the cyclic collector frees.
            item.error = None
            try:
                raise error
            finally:
                del error
        return item.result

    # --- the loop -----------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """Commit what is queued, batch after batch, until :meth:`close` and nothing is left.

        Cancellation: a batch being committed completes (the thread is never abandoned in a
        transaction); what is still queued then is undone and its waiting callers are told.
        """
        self._running = True
        task_status.started()
        try:
            while True:
                if not self._queued:
                    if self._closing:
                        return
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    continue
                await self._commit_batch()
        finally:
            self._running = False
            rest, self._queued = self._queued, []
            self._fail(rest, ServerUnavailable(f"the task store ({self._path}) was closed "
                                               "before this was written"))

    def close(self) -> None:
        """Stop taking ops; the loop returns once what is queued is committed."""
        self._closing = True
        self._wake.set()

    async def _commit_batch(self) -> None:
        batch, self._queued = self._queued, []
        runs = [(item.work.run, item.work.refusable, item.work.append) for item in batch]
        try:
            with anyio.CancelScope(shield=True):  # never leave a batch half-answered
                results = await anyio.to_thread.run_sync(self._commit, runs,
                                                         limiter=self._limiter)
        except sqlite3.Error as exc:
            log.error("SQLite store commit failed: %s", exc)
            # Ops queued meanwhile were decided on top of this batch: they go too.
            rest, self._queued = self._queued, []
            self._fail([*batch, *rest], unavailable(exc, self._path))
            return
        self.batches += 1
        self.ops += len(batch)
        for item, result in zip(batch, results, strict=True):
            work = item.work
            if isinstance(result, Refused):
                if work.undo is not None:
                    work.undo(str(result.error))
                item.error = result.error
            else:
                try:
                    item.result = work.done(result) if work.done is not None else result
                except Exception as exc:
                    item.error = exc
            if item.finished is not None:
                item.finished.set()
            elif item.error is not None:
                log.error("a queued write was refused: %s", item.error)
                # Nobody raises it: dropped, as its traceback holds this frame (``batch``).
                item.error = None

    @staticmethod
    def _fail(items: list[_Item], error: ServerUnavailable) -> None:
        for item in reversed(items):  # newest first: each undo goes back to the one before
            if item.work.undo is not None:
                item.work.undo(str(error))
            item.error = error
            if item.finished is not None:
                item.finished.set()

    def _commit(self, runs: list[tuple[Callable[[sqlite3.Connection], Any] | None, bool,
                                       Appended | None]]) -> list[Any]:
        """One transaction (in the writer thread): each op that may refuse itself in a
        savepoint of its own; the appended events all at once, last."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            out: list[Any] = []
            appended: list[Appended] = []
            for run, refusable, append in runs:
                if run is None:
                    assert append is not None
                    appended.append(append)
                    out.append(append)  # what its ``done`` publishes
                    continue
                if not refusable:
                    out.append(run(conn))
                    continue
                conn.execute("SAVEPOINT op")
                # A refusal is kept without its traceback: that holds this frame, whose
                # ``out`` holds the refusal (a cycle, with the whole batch's ops and bodies,
                # that only the cyclic collector frees); the caller raises it as its own.
                try:
                    out.append(run(conn))
                except Refused as exc:
                    conn.execute("ROLLBACK TO op")
                    exc.error.with_traceback(None)
                    out.append(exc.with_traceback(None))
                except sqlite3.IntegrityError as exc:
                    conn.execute("ROLLBACK TO op")
                    out.append(Refused(exc.with_traceback(None)))
                conn.execute("RELEASE op")
            if appended:
                _write_appended(conn, appended)
            conn.execute("COMMIT")
            return out
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def call(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` on the writer's connection between batches (maintenance, closing)."""
        try:
            return await anyio.to_thread.run_sync(fn, self._conn, limiter=self._limiter)
        except sqlite3.Error as exc:
            raise unavailable(exc, self._path) from None


_ROWS_PER_INSERT = 256  # 1,024 parameters: well under SQLite's limit (32,766)


@functools.lru_cache(maxsize=64)
def _insert_events(rows: int) -> str:
    return "INSERT INTO events VALUES " + ", ".join(["(?, ?, ?, ?)"] * rows)


def _write_appended(conn: sqlite3.Connection, appended: list[Appended]) -> None:
    """The events of a batch: one INSERT for all, one row update per task (the latest position,
    state and snapshot; the bytes added up), the log caps' trims."""
    # Many rows per statement rather than executemany: the sqlite3 module hands the GIL back and
    # forth around every step, and each hand-over costs the event loop's thread CPU too.
    for start in range(0, len(appended), _ROWS_PER_INSERT):
        chunk = appended[start:start + _ROWS_PER_INSERT]
        params: list[Any] = []
        for a in chunk:
            params += (a.seq, a.pos, a.kind, a.body)
        conn.execute(_insert_events(len(chunk)), params)
    rows: dict[int, list[Any]] = {}
    for a in appended:  # in order: a later event's values win, its bytes add up
        row = rows.get(a.seq)
        if row is None:
            row = rows[a.seq] = [a.pos, 0, None, None, None, None, None, a.seq]
        row[0] = a.pos
        row[1] += a.grow
        if a.state is not None:
            row[2], row[3], row[4] = a.state, a.ts, a.ended_at
        if a.snap is not None:
            row[5], row[6] = a.snap, a.pos
    conn.executemany(
        "UPDATE tasks SET last = ?, size = size + ?, state = coalesce(?, state), "
        "ts = coalesce(?, ts), ended_at = coalesce(?, ended_at), snap = coalesce(?, snap), "
        "snap_pos = coalesce(?, snap_pos) WHERE seq = ?", list(rows.values()))
    trims = [(a.seq, a.trim) for a in appended if a.trim >= 1]
    if trims:
        conn.executemany("DELETE FROM events WHERE task = ? AND pos = ?", trims)
