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
