"""Liveness leases on PostgreSQL (:class:`~scoped_a2a.store.process_leases.ProcessLeases`).

The table ``processes`` maps each process id to the time its lease runs out (the database's
clock, epoch seconds: replicas on several machines agree whatever their own clocks say). The
task row's ``process`` column names the process whose lease covers its interactive run: the
interactive create sets it and the terminal append clears it, in the statements that write the
task anyway (no round trip of its own per run). The heartbeat is one upsert per process and
period. :meth:`PostgresLeases.lapsed` locks lapsed processes with ``FOR UPDATE SKIP LOCKED``
and hands each to one reaper for half a lease (``reaping_until``: a reaper that died is
replaced soon, and the next batch of a large process goes out quickly); a lapsed process none
of whose tasks still runs is forgotten. Each task handed out is also announced on the cancel
channel (sealed, :mod:`.sealed`), so a process that is alive after all (a network partition)
stops its run at once.

Cancellation: each call is one transaction (connection.py), committed whole or not at all.
Errors: ServerUnavailable when the database cannot be used.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection

from ...protocol.ids import new_id
from ..liveness import LOST_REASON, cancel_request
from ..process_leases import DEFAULT_LEASE
from .connection import Conn, Pool
from .schema import NOW
from .sealed import SealedChannel

MAX_TASKS = 1000
"""Tasks of one lapsed process handed out per check (the next check gets the rest)."""
MAX_PROCESSES = 20
"""Lapsed processes handed out per check."""


class PostgresLeases:
    """The liveness lease of one process on one PostgreSQL schema."""

    def __init__(self, pool: Pool, lease: float = DEFAULT_LEASE) -> None:
        if lease <= 0:
            raise ValueError("the lease must be positive")
        self.pool = pool
        self.lease = lease
        self.process_id = f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        self.cancel_channel = f"{pool.schema}_cancel"
        self.cancels: SealedChannel | None = None
        """Seals the cancel requests of lapsed processes' tasks (set by ``open_postgres_store``;
        None: none are sent, and only the lease rule stops those runs)."""
        self._first = True
        self._tried = False

    @property
    def renewed(self) -> bool:
        """Whether a renewal was attempted (it may have committed even if its caller was
        cancelled first: a store closed at once still retires its lease)."""
        return self._tried

    async def beat(self) -> bool:
        self._tried = True
        async def run(conn: Conn) -> bool:
            # The CTE reads the row as it was before the upsert: had the lease run out (or
            # was the process forgotten by a reaper)?
            row = await conn.one(
                f"WITH prev AS (SELECT expires FROM processes WHERE id = %s) "
                f"INSERT INTO processes (id, expires) VALUES (%s, {NOW} + %s) "
                f"ON CONFLICT (id) DO UPDATE SET expires = excluded.expires, "
                f"reaping_until = NULL "
                f"RETURNING coalesce((SELECT expires FROM prev) >= {NOW}, FALSE)",
                (self.process_id, self.process_id, self.lease))
            return bool(row and row[0])

        ok = await self.pool.run(run, background=True)
        first, self._first = self._first, False
        return ok or first

    async def lapsed(self) -> list[tuple[str, list[str]]]:
        me, half, channel, cancels = (self.process_id, self.lease / 2, self.cancel_channel,
                                      self.cancels)

        async def run(conn: Conn) -> list[tuple[str, list[str]]]:
            dead = [r[0] for r in await conn.all(
                f"SELECT id FROM processes WHERE expires < {NOW} AND id <> %s AND "
                f"(reaping_until IS NULL OR reaping_until < {NOW}) ORDER BY expires "
                f"LIMIT %s FOR UPDATE SKIP LOCKED", (me, MAX_PROCESSES))]
            out: list[tuple[str, list[str]]] = []
            for process in dead:
                # The terminal append clears ``process``: every task still naming it runs.
                ids = [r[0] for r in await conn.all(
                    "SELECT id FROM tasks WHERE process = %s LIMIT %s",
                    (process, MAX_TASKS))]
                if not ids:
                    await conn.execute("DELETE FROM processes WHERE id = %s", (process,))
                    continue
                await conn.execute(f"UPDATE processes SET reaping_until = {NOW} + %s WHERE id = %s",
                             (half, process))
                if cancels is not None:  # sealed: any role that can connect may NOTIFY
                    await conn.execute("SELECT pg_notify(%s, t) FROM unnest(%s::text[]) t",
                                       (channel, [cancels.wrap(cancel_request(
                                           i, LOST_REASON).encode()) for i in ids]))
                out.append((process, ids))
            return out

        result: list[tuple[str, list[str]]] = await self.pool.run(run, background=True)
        return result

    async def covers(self, task_id: str) -> bool:
        row = await self.pool.run(lambda c: c.one(
            "SELECT process IS NOT NULL FROM tasks WHERE id = %s", (task_id,)),
            retry=True)
        return bool(row and row[0])

    async def alive(self, process_ids: Collection[str]) -> set[str]:
        ids = list(process_ids)
        if not ids:
            return set()
        rows = await self.pool.run(lambda c: c.all(
            f"SELECT id FROM processes WHERE id = ANY(%s) AND expires >= {NOW}",
            (ids,)), retry=True)
        return {str(r[0]) for r in rows}

    async def retire(self) -> None:
        await self.pool.run(lambda c: c.execute(
            "DELETE FROM processes WHERE id = %s AND NOT EXISTS "
            "(SELECT 1 FROM tasks WHERE process = %s)", (self.process_id, self.process_id)))
