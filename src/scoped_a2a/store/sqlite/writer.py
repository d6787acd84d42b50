"""The one writer of the SQLite store: every write is an op, ops are committed in batches.

Group commit. A caller hands :meth:`Writer.write` an op (``prepare``) and waits. If no batch is
being committed, it leads one: it takes every op waiting, prepares each on the event loop (the
op decides there, from the store's memory, what it will write: positions, folds, refusals),
runs their SQL in one transaction in the writer thread (``anyio.to_thread.run_sync`` with a
capacity limiter of one, so the event loop never waits on SQLite and the connection is never
used by two threads), and only after the COMMIT returns does each op publish what it changed
and its caller get its answer. Ops that arrive meanwhile wait for the next batch. So nothing is
acknowledged, or visible to readers, before it is on disk, and under load one commit (one
fsync) serves many writes.

Errors. An op's own refusal (``Refused``, or an ``sqlite3.IntegrityError``) rolls back only that
op (a savepoint) and is raised to its caller. Anything else (disk full, I/O error) rolls back
the whole batch: every op in it is undone in memory and its caller gets ``ServerUnavailable``
saying what went wrong; nothing is half-written.

Cancellation. A caller cancelled while its op still waits for a batch withdraws it (it never
happens). Once its batch is committing the op happens completely, and the cancellation is
delivered when the commit returns (the thread is never abandoned mid-transaction).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ...protocol.errors import ServerUnavailable

log = logging.getLogger("scoped_a2a.sqlite")


class Refused(Exception):
    """Raised by an op's SQL to refuse itself (only that op is rolled back)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class Work:
    """What a prepared op does: ``run`` in the writer thread (inside the batch's transaction),
    then ``done`` on the loop after the commit (its return value is the op's answer), or
    ``undo`` on the loop if the batch did not commit."""

    run: Callable[[sqlite3.Connection], Any]
    done: Callable[[Any], Any] | None = None
    undo: Callable[[], None] | None = None
    refusable: bool = True  # False: ``run`` never refuses (no savepoint needed around it)


_PENDING = object()


class _Item:
    __slots__ = ("error", "prepare", "result")

    def __init__(self, prepare: Callable[[], Work]) -> None:
        self.prepare = prepare
        self.result: Any = _PENDING
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


class Writer:
    """Commits ops on one connection, in batches (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection, path: object) -> None:
        self._conn = conn
        self._path = path
        self._limiter = anyio.CapacityLimiter(1)
        self._pending: list[_Item] = []
        self._busy = False
        self._batch_done = anyio.Event()
        self.batches = 0
        self.ops = 0

    async def write(self, prepare: Callable[[], Work]) -> Any:
        """Commit one op; return what its ``done`` returned, or raise its refusal."""
        item = _Item(prepare)
        self._pending.append(item)
        while item.result is _PENDING and item.error is None:
            if not self._busy:
                await self._lead()
                continue
            done = self._batch_done
            try:
                await done.wait()
            except BaseException:
                if item in self._pending:  # not taken by a batch yet: it never happens
                    self._pending.remove(item)
                    raise
                raise
        if item.error is not None:
            raise item.error
        return item.result

    async def _lead(self) -> None:
        self._busy = True
        batch, self._pending = self._pending, []
        works: list[tuple[_Item, Work]] = []
        try:
            for item in batch:
                try:
                    works.append((item, item.prepare()))
                except Exception as exc:
                    item.error = exc
            if not works:
                return
            runs = [(w.run, w.refusable) for _, w in works]
            try:
                results = await anyio.to_thread.run_sync(self._commit, runs,
                                                         limiter=self._limiter)
            except sqlite3.Error as exc:
                log.error("SQLite store commit failed: %s", exc)
                error = ServerUnavailable(failure_text(exc, self._path))
                for item, work in works:
                    if work.undo is not None:
                        work.undo()
                    item.error = error
                return
            self.batches += 1
            self.ops += len(works)
            for (item, work), result in zip(works, results, strict=True):
                if isinstance(result, Refused):
                    if work.undo is not None:
                        work.undo()
                    item.error = result.error
                    continue
                try:
                    item.result = work.done(result) if work.done is not None else result
                except Exception as exc:
                    item.error = exc
        finally:
            self._busy = False
            self._batch_done.set()
            self._batch_done = anyio.Event()

    def _commit(self, runs: list[tuple[Callable[[sqlite3.Connection], Any], bool]]
                ) -> list[Any]:
        """One transaction (in the writer thread): each op that may refuse itself in a
        savepoint of its own."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            out: list[Any] = []
            single = len(runs) == 1
            for run, refusable in runs:
                if not refusable:
                    out.append(run(conn))
                    continue
                if single:  # the transaction itself is the op's savepoint
                    try:
                        out.append(run(conn))
                    except Refused as exc:
                        conn.execute("ROLLBACK")
                        return [exc]
                    except sqlite3.IntegrityError as exc:
                        conn.execute("ROLLBACK")
                        return [Refused(exc)]
                    continue
                conn.execute("SAVEPOINT op")
                try:
                    out.append(run(conn))
                except Refused as exc:
                    conn.execute("ROLLBACK TO op")
                    out.append(exc)
                except sqlite3.IntegrityError as exc:
                    conn.execute("ROLLBACK TO op")
                    out.append(Refused(exc))
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
            return out
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def call(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` on the writer's connection, outside any batch (maintenance: vacuum)."""
        async def run() -> Any:
            try:
                return await anyio.to_thread.run_sync(fn, self._conn, limiter=self._limiter)
            except sqlite3.Error as exc:
                raise ServerUnavailable(failure_text(exc, self._path)) from None
        return await run()
