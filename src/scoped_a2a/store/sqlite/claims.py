"""Message claims in the SQLite file (docs/exactly-once.md): the SQL each claim op runs in the
writer thread, inside its batch's transaction, so two sends of one message get one winner.

A claim row is pending (``pending_until`` set) until its task is stored; a pending claim whose
task never appeared (its sender died between the claim and the task's creation, e.g. a kill -9)
lapses after :data:`CLAIM_PENDING` seconds. When retention deletes a task its claims linger for
the claim window (``gone_until``), then go.
"""

from __future__ import annotations

import sqlite3
import time

from ..claims import PriorSend

CLAIM_PENDING = 30.0
"""Seconds a claim waits for its task to be stored before it lapses."""


def _task_exists(conn: sqlite3.Connection, task_id: str) -> bool:
    return conn.execute("SELECT 1 FROM tasks WHERE id = ?", (task_id,)).fetchone() is not None


def _prior(conn: sqlite3.Connection, row: tuple[bytes, str, int, float | None, float | None]
           ) -> PriorSend:
    fp, task_id, position, _pending, gone = row
    created = gone is not None or _task_exists(conn, task_id)
    return PriorSend(task_id, bytes(fp), int(position), created)


def _get(conn: sqlite3.Connection, key: bytes
         ) -> tuple[bytes, str, int, float | None, float | None] | None:
    now = time.time()
    row = conn.execute(
        "SELECT fingerprint, task_id, position, pending_until, gone_until FROM claims "
        "WHERE key = ?", (key,)).fetchone()
    if row is None:
        return None
    _fp, task_id, _pos, pending, gone = row
    lapsed = (gone is not None and gone < now) or (
        gone is None and pending is not None and pending < now
        and not _task_exists(conn, task_id))
    if lapsed:
        conn.execute("DELETE FROM claims WHERE key = ?", (key,))
        return None
    return row  # type: ignore[no-any-return]


def claim(conn: sqlite3.Connection, key: bytes, fingerprint: bytes, task_id: str,
          position: int, created: bool) -> PriorSend | None:
    row = _get(conn, key)
    if row is not None:
        return _prior(conn, row)
    pending = None if created else time.time() + CLAIM_PENDING
    conn.execute("INSERT INTO claims VALUES (?, ?, ?, ?, ?, NULL)",
                 (key, fingerprint, task_id, position, pending))
    return None


def reclaim(conn: sqlite3.Connection, key: bytes, old_task_id: str, new_task_id: str
            ) -> PriorSend | None:
    row = _get(conn, key)
    if row is None:
        return PriorSend("", b"", 0, False)
    if row[1] != old_task_id:
        return _prior(conn, row)
    conn.execute("UPDATE claims SET task_id = ?, position = 0, pending_until = ?, "
                 "gone_until = NULL WHERE key = ?",
                 (new_task_id, time.time() + CLAIM_PENDING, key))
    return None


def release(conn: sqlite3.Connection, key: bytes, task_id: str) -> None:
    conn.execute("DELETE FROM claims WHERE key = ? AND task_id = ?", (key, task_id))


def tasks_gone(conn: sqlite3.Connection, task_ids: list[str], window: float) -> None:
    """Retention deleted these tasks: their claims linger for ``window`` seconds; expired
    lingering claims go."""
    now = time.time()
    conn.executemany("UPDATE claims SET gone_until = ? WHERE task_id = ?",
                     [(now + window, t) for t in task_ids])
    conn.execute("DELETE FROM claims WHERE gone_until IS NOT NULL AND gone_until < ?", (now,))


def lookup(conn: sqlite3.Connection, key: bytes) -> PriorSend | None:
    """The claim of ``key`` in the file (read only; a lapsed one is no claim)."""
    now = time.time()
    row = conn.execute(
        "SELECT fingerprint, task_id, position, pending_until, gone_until FROM claims "
        "WHERE key = ?", (key,)).fetchone()
    if row is None:
        return None
    _fp, task_id, _pos, pending, gone = row
    if (gone is not None and gone < now) or (
            gone is None and pending is not None and pending < now
            and not _task_exists(conn, task_id)):
        return None
    return _prior(conn, row)


class Pending:
    """Claims of new tasks not stored yet, held in memory (one process owns the file): they are
    written in the transaction that stores their task, so a send costs no commit of its own for
    its claim. A crash loses only claims whose send was never acknowledged."""

    def __init__(self) -> None:
        self._claims: dict[bytes, tuple[bytes, str, int, float]] = {}
        self._of: dict[str, list[bytes]] = {}

    def get(self, key: bytes) -> tuple[bytes, str, int] | None:
        held = self._claims.get(key)
        if held is None:
            return None
        if held[3] < time.monotonic():  # lapsed: its send neither stored nor released it
            self.drop(key)
            return None
        return held[0], held[1], held[2]

    def add(self, key: bytes, fingerprint: bytes, task_id: str, position: int) -> None:
        self._claims[key] = (fingerprint, task_id, position, time.monotonic() + CLAIM_PENDING)
        self._of.setdefault(task_id, []).append(key)

    def drop(self, key: bytes) -> None:
        held = self._claims.pop(key, None)
        if held is not None:
            keys = self._of.get(held[1], [])
            if key in keys:
                keys.remove(key)
            if not keys:
                self._of.pop(held[1], None)

    def rows_of(self, task_id: str) -> list[tuple[bytes, bytes, str, int]]:
        """The pending claims of ``task_id`` as rows for the claims table."""
        return [(key, self._claims[key][0], task_id, self._claims[key][2])
                for key in self._of.get(task_id, ()) if key in self._claims]


def write_made(conn: sqlite3.Connection, rows: list[tuple[bytes, bytes, str, int]]) -> None:
    """Store claims made by their task's creation (in its transaction)."""
    conn.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, NULL, NULL)", rows)
