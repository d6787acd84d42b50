"""Retention of the SQLite store: ended tasks deleted by age, count and bytes, oldest first (the
policy: ``store/retention.py``).

Running tasks are never deleted. The sweep is one op in the writer's batch (its SQL runs in the
writer thread); SQLite puts the pages it frees on its free list and reuses them for new tasks,
so a file under retention stops growing. Claims of deleted tasks linger for the claim window.
"""

from __future__ import annotations

import sqlite3
import time

from ..retention import Retention
from . import claims


def sweep(conn: sqlite3.Connection, policy: Retention, count: int, size: int,
          keep: str | None) -> list[tuple[str, int]]:
    """Delete ended tasks beyond the policy, oldest-ended first (never ``keep``, the task that
    just ended); return the (id, size) of each deleted."""
    victims: list[tuple[int, str, int]] = []
    if policy.retain is not None:
        victims += conn.execute(
            "SELECT seq, id, size FROM tasks WHERE ended_at IS NOT NULL AND ended_at < ? "
            "ORDER BY ended_at LIMIT 5000", (time.time() - policy.retain,)).fetchall()
    count -= len(victims)
    size -= sum(v[2] for v in victims)
    if count > policy.max_ended_tasks or size > policy.max_ended_bytes:
        seen = {v[0] for v in victims}
        rows = conn.execute(
            "SELECT seq, id, size FROM tasks WHERE ended_at IS NOT NULL ORDER BY ended_at "
            "LIMIT ?", (len(victims) + max(count - policy.max_ended_tasks, 0) + 1000,))
        for seq, task_id, task_size in rows:
            if count <= policy.max_ended_tasks and size <= policy.max_ended_bytes:
                break
            if seq in seen or task_id == keep:
                continue
            victims.append((seq, task_id, task_size))
            count -= 1
            size -= task_size
    if not victims:
        return []
    seqs = [(v[0],) for v in victims]
    conn.executemany("DELETE FROM events WHERE task = ?", seqs)
    conn.executemany("DELETE FROM push WHERE task = ?", seqs)
    conn.executemany("DELETE FROM tasks WHERE seq = ?", seqs)
    claims.tasks_gone(conn, [v[1] for v in victims], policy.claim_window)
    return [(v[1], v[2]) for v in victims]
