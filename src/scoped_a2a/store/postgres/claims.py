"""Message claims in PostgreSQL (docs/exactly-once.md): the SQL of each claim op, run in the
caller's transaction, so two sends of one message on any replicas get one winner.

A claim row is pending (``pending_until`` set) until its task is stored (create and the run
queue clear it in their transaction) or a follow-up is confirmed; a pending claim whose task
never appeared (its sender died in between) lapses after :data:`CLAIM_PENDING` seconds. When
retention deletes a task its claims linger for the claim window (``gone_until``), then go.
"""

from __future__ import annotations

import psycopg

from ..claims import PriorSend
from .connection import Conn
from .schema import NOW

CLAIM_PENDING = 30.0
"""Seconds a claim waits for its task to be stored before it lapses."""

Row = tuple[bytes, str, int, float | None, float | None]


async def _exists(conn: Conn, task_id: str) -> bool:
    return await conn.one("SELECT 1 FROM tasks WHERE id = %s", (task_id,)) is not None


async def _prior(conn: Conn, row: Row) -> PriorSend:
    fp, task_id, position, _pending, gone = row
    created = gone is not None or await _exists(conn, task_id)
    return PriorSend(task_id, bytes(fp), int(position), created)


async def _get(conn: Conn, key: bytes) -> Row | None:
    """The live claim of ``key``, locked for this transaction; a lapsed one is deleted."""
    row = await conn.one(
        f"SELECT fingerprint, task_id, position, pending_until, gone_until, {NOW} FROM claims "
        "WHERE key = %s FOR UPDATE", (key,))
    if row is None:
        return None
    fp, task_id, pos, pending, gone, now = row
    lapsed = (gone is not None and gone < now) or (
        gone is None and pending is not None and pending < now and not await _exists(conn, task_id))
    if lapsed:
        await conn.execute("DELETE FROM claims WHERE key = %s", (key,))
        return None
    return (fp, task_id, pos, pending, gone)


async def claim(conn: Conn, key: bytes, fingerprint: bytes, task_id: str,
          position: int, created: bool) -> PriorSend | None:
    """Claim ``key`` for ``task_id``: None if it was free, else the claim that holds it.

    A pending claim commits without waiting for its WAL flush: it matters only once its task
    is stored, and that later synchronous commit flushes the WAL up to it (a claim whose task
    never comes may be lost with a crash of the server, harmlessly). Saves a flush per send.
    """
    if not created:
        await conn.execute("SET LOCAL synchronous_commit = off")
    return await _claim(conn, key, fingerprint, task_id, position, created)


async def claim_free(conn: Conn, key: bytes, fingerprint: bytes, task_id: str, position: int,
                     created: bool) -> bool:
    """The usual case in one statement (no transaction around it): the key was never
    claimed, and now is (True); False: it is held or lapsed, take :func:`claim`."""
    pending = "NULL" if created else f"{NOW} + {CLAIM_PENDING}"
    row = await conn.one(
        f"INSERT INTO claims SELECT %s, %s, %s, %s, {pending}, NULL FROM (SELECT "
        "set_config('synchronous_commit', %s, true)) s ON CONFLICT (key) DO NOTHING "
        "RETURNING 1", (key, fingerprint, task_id, position, "on" if created else "off"))
    return row is not None


async def _claim(conn: Conn, key: bytes, fingerprint: bytes, task_id: str, position: int,
                 created: bool) -> PriorSend | None:
    for _ in range(3):
        row = await _get(conn, key)
        if row is not None:
            return await _prior(conn, row)
        pending = "NULL" if created else f"{NOW} + {CLAIM_PENDING}"
        done = await conn.one(
            f"INSERT INTO claims VALUES (%s, %s, %s, %s, {pending}, NULL) "
            "ON CONFLICT (key) DO NOTHING RETURNING 1",
            (key, fingerprint, task_id, position))
        if done is not None:
            return None
        # Another send of it committed its claim meanwhile: read that one.
    raise psycopg.OperationalError("a message claim kept changing under this send")


async def reclaim(conn: Conn, key: bytes, old_task_id: str, new_task_id: str
            ) -> PriorSend | None:
    row = await _get(conn, key)
    if row is None:
        return PriorSend("", b"", 0, False)
    if row[1] != old_task_id:
        return await _prior(conn, row)
    await conn.execute(f"UPDATE claims SET task_id = %s, position = 0, pending_until = {NOW} + "
                 f"{CLAIM_PENDING}, gone_until = NULL WHERE key = %s", (new_task_id, key))
    return None


async def confirm(conn: Conn, key: bytes, task_id: str) -> None:
    await conn.execute("UPDATE claims SET pending_until = NULL WHERE key = %s AND task_id = %s",
                 (key, task_id))


async def release(conn: Conn, key: bytes, task_id: str) -> None:
    """Drop the claim of a send that failed, unless it is the made claim of a queued run's
    task: a commit whose answer was lost (connection.CommitUnknown) looks failed to its sender,
    and the run it queued will execute, so the resend must find that task, not run the message
    a second time. An interactive task stored so has no run (its sender failed before starting
    one): its claim goes, and the resend runs the message as a new task. A follow-up's claim is
    pending until confirmed: it goes."""
    await conn.execute("DELETE FROM claims c WHERE key = %s AND task_id = %s AND NOT "
                       "(pending_until IS NULL AND EXISTS (SELECT 1 FROM tasks t WHERE "
                       "t.id = c.task_id AND t.process IS NULL))", (key, task_id))


async def tasks_gone(conn: Conn, task_ids: list[str], window: float) -> None:
    """Retention deleted these tasks: their claims linger for ``window`` seconds; expired
    lingering claims go."""
    await conn.execute(f"UPDATE claims SET gone_until = {NOW} + %s WHERE task_id = ANY(%s)",
                 (window, task_ids))
    await conn.execute(f"DELETE FROM claims WHERE gone_until IS NOT NULL AND gone_until < {NOW}")
