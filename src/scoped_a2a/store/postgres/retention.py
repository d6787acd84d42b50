"""Retention in PostgreSQL: ended tasks beyond the policy deleted, oldest-ended first.

The policy (:class:`..retention.Retention`): ``--retain`` seconds, ``--max-ended-tasks``
and ``--max-ended-bytes`` over every ended task of the schema. A sweep reads ended tasks
newest-ended first through the ``tasks_ended`` index and stops after the ones kept plus one
batch of victims: its cost grows with the policy's bounds, not with the ended tasks stored
(100,000 of them cost no more to sweep than 10,001). Each sweep deletes at most
:data:`BATCH` tasks (the next sweeps take the rest), their claims linger for the claim window
(claims.py), and a ``NOTIFY`` tells every replica's waiters the task is gone.

Cancellation: one transaction (connection.py). Errors: ServerUnavailable.
"""

from __future__ import annotations

from ..retention import Retention
from . import claims
from .connection import Conn, Pool
from .schema import NOW

SWEEP_EVERY = 5.0
"""Seconds between two retention sweeps of one process."""
BATCH = 5000
"""Tasks deleted by one sweep at most."""


async def sweep(pool: Pool, policy: Retention, channel: str) -> int:
    """Delete ended tasks older than ``policy.retain`` and beyond its count and bytes,
    oldest-ended first; how many were deleted."""

    async def run(conn: Conn) -> int:
        victims: list[tuple[int, str]] = []
        if policy.retain is not None:
            victims += await conn.all(
                f"SELECT seq, id FROM tasks WHERE ended_at IS NOT NULL AND ended_at < "
                f"{NOW} - %s ORDER BY ended_at LIMIT {BATCH}", (policy.retain,))
        # Beyond the count or the bytes: the oldest ended, past the newest that fit (the
        # newest is kept whatever its size: its caller is about to read its end). The inner
        # LIMIT bounds what is read: the kept ones and one batch beyond them.
        victims += await conn.all(
            "SELECT seq, id FROM (SELECT seq, id, row_number() OVER w AS n, "
            "sum(size) OVER w AS total FROM (SELECT seq, id, size, ended_at FROM tasks "
            "WHERE ended_at IS NOT NULL ORDER BY ended_at DESC, seq DESC LIMIT %s) r "
            "WINDOW w AS (ORDER BY ended_at DESC, seq DESC)) x "
            f"WHERE n > %s OR (total > %s AND n > 1) LIMIT {BATCH}",
            (policy.max_ended_tasks + BATCH, policy.max_ended_tasks, policy.max_ended_bytes))
        if not victims:
            return 0
        seqs = sorted({v[0] for v in victims})
        ids = sorted({v[1] for v in victims})
        await conn.execute("DELETE FROM tasks WHERE seq = ANY(%s)", (seqs,))
        await claims.tasks_gone(conn, ids, policy.claim_window)
        await conn.execute("SELECT pg_notify(%s, '0 ' || t) FROM unnest(%s::text[]) t",
                           (channel, ids))
        return len(seqs)

    return int(await pool.run(run))
