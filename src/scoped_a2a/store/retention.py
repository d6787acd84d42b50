"""The retention policy of the durable stores (no I/O): how long, and how many and how large,
ended tasks are kept. Running tasks are never deleted.

Each store applies it its own way: SQLite in its writer's batch (``store/sqlite/retention.py``),
PostgreSQL in one statement over the schema (``store/postgres/store.py``, ``sweep``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Retention:
    """``retain``: seconds an ended task is kept (None: no age limit); ``max_ended_tasks`` and
    ``max_ended_bytes``: caps on ended tasks (their snapshots plus kept events);
    ``claim_window``: seconds a deleted task's message claims linger (docs/exactly-once.md)."""

    retain: float | None = None
    max_ended_tasks: int = 10_000
    max_ended_bytes: int = 256 << 20
    claim_window: float = 600.0
