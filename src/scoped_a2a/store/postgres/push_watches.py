"""Push watches that outlive their process, on PostgreSQL
(:class:`~scoped_a2a.store.push_watches.PushWatches`).

The ``push`` row of a config keeps its watch's progress (``cursor``, ``state``, ``v1``) and,
since schema version 2, its ``owner``: NULL for a config just stored whose watch is being
taken (:meth:`PostgresPushWatches.own` follows in the next statement of the same call),
a process id, ``''`` once released by its owner's clean shutdown, ``'-'`` once the watch ended.
An owner is alive while its ``processes`` row (the liveness lease, :mod:`.leases`) has not run
out by the database's clock. Adoption takes rows ``FOR UPDATE SKIP LOCKED``, so two processes
checking at once take different watches.

Cancellation: each call is one transaction (or one statement), committed whole or not at all.
An adoption whose reply was lost (cancelled, or the connection cut after its commit) may have
made a batch this process's that it does not watch: the next adoption then also returns every
unended watch the store says this process owns (those it watches already are skipped by the
caller, ``PushService._watch``), so such a batch is watched one period later, not left until
the process exits. Errors: ServerUnavailable.
"""

from __future__ import annotations

from ...protocol.types import TaskState
from ..push_watches import Pending, Progress
from .connection import Conn, Pool
from .leases import PostgresLeases
from .schema import NOW

_TERMINAL = [s.value for s in TaskState if s.terminal]
ENDED = "-"
"""``push.owner`` of a watch that ended (nobody adopts it)."""


class PostgresPushWatches:
    """The push watches of one process on one PostgreSQL schema."""

    def __init__(self, pool: Pool, leases: PostgresLeases) -> None:
        self.pool = pool
        self.process_id = leases.process_id
        self.period = leases.lease / 3
        self._unsure = False  # an adoption's reply was lost: re-read what we own

    async def own(self, task_id: str, config_id: str, progress: Progress) -> Progress | None:
        me = self.process_id

        async def run(conn: Conn) -> Progress | None:
            row = await conn.one(
                f"SELECT p.task, p.owner, p.cursor, p.state, p.v1, "
                f"coalesce(pr.expires >= {NOW}, FALSE) FROM push p JOIN tasks t ON "
                f"t.seq = p.task LEFT JOIN processes pr ON pr.id = p.owner "
                f"WHERE t.id = %s AND p.config_id = %s FOR UPDATE OF p",
                (task_id, config_id))
            if row is None:
                return None  # deleted meanwhile: nothing to watch
            seq, owner, cursor, state, v1, alive = row
            if owner not in (None, "", ENDED, me) and alive:
                return None
            at: Progress = (progress if owner in (None, ENDED)
                            else (int(cursor), str(state), bool(v1)))
            await conn.execute("UPDATE push SET owner = %s, cursor = %s, state = %s, v1 = %s "
                               "WHERE task = %s AND config_id = %s",
                               (me, at[0], at[1], at[2], seq, config_id))
            return at

        result: Progress | None = await self.pool.run(run)
        return result

    async def progress(self, task_id: str, config_id: str, progress: Progress) -> bool:
        cursor, state, v1 = progress
        async def run(conn: Conn) -> int:
            cur = await conn.execute(
                "UPDATE push p SET cursor = %s, state = %s, v1 = %s FROM tasks t WHERE "
                "t.seq = p.task AND t.id = %s AND p.config_id = %s AND p.owner = %s",
                (cursor, state, v1, task_id, config_id, self.process_id))
            return int(cur.rowcount)

        return bool(await self.pool.run(run, transaction=False))

    async def done(self, task_id: str, config_id: str) -> None:
        await self.pool.run(lambda c: c.execute(
            "UPDATE push p SET owner = %s FROM tasks t WHERE t.seq = p.task AND t.id = %s "
            "AND p.config_id = %s AND (p.owner = %s OR p.owner = '')",
            (ENDED, task_id, config_id, self.process_id)), transaction=False)

    async def release(self, watches: list[tuple[str, str]]) -> None:
        if not watches:
            return
        tasks = [t for t, _ in watches]
        configs = [c for _, c in watches]
        await self.pool.run(lambda c: c.execute(
            "UPDATE push p SET owner = '' FROM tasks t, unnest(%s::text[], %s::text[]) "
            "AS w(task_id, config_id) WHERE t.id = w.task_id AND p.task = t.seq AND "
            "p.config_id = w.config_id AND p.owner = %s", (tasks, configs, self.process_id)),
            transaction=False)

    async def adopt(self, limit: int) -> list[Pending]:
        me = self.process_id
        # After a lost reply, also what we own already (the statement's snapshot is from
        # before its UPDATE, so a watch it takes now is not listed twice).
        mine = (" UNION ALL SELECT t.id, p.config_id, p.cursor, p.state, p.v1 FROM push p "
                "JOIN tasks t ON t.seq = p.task WHERE p.owner = %s "
                "AND NOT (p.state = ANY(%s))") if self._unsure else ""

        async def run(conn: Conn) -> list[Pending]:
            rows = await conn.all(
                f"WITH free AS (SELECT p.task, p.config_id FROM push p "
                f"LEFT JOIN processes pr ON pr.id = p.owner "
                f"WHERE p.owner IS NOT NULL AND p.owner <> %s AND p.owner <> %s "
                f"AND NOT (p.state = ANY(%s)) "
                f"AND (p.owner = '' OR pr.id IS NULL OR pr.expires < {NOW}) "
                f"LIMIT %s FOR UPDATE OF p SKIP LOCKED), "
                f"taken AS (UPDATE push p SET owner = %s FROM free, tasks t "
                f"WHERE p.task = free.task AND p.config_id = free.config_id "
                f"AND t.seq = p.task "
                f"RETURNING t.id, p.config_id, p.cursor, p.state, p.v1) "
                f"SELECT * FROM taken{mine}",
                (ENDED, me, _TERMINAL, limit, me, *((me, _TERMINAL) if mine else ())))
            return [(str(t), str(c), int(cur), str(st), bool(v1))
                    for t, c, cur, st, v1 in rows]

        self._unsure = True  # until the answer is here: it may commit unheard
        result: list[Pending] = await self.pool.run(run, transaction=False)  # one statement
        self._unsure = False
        return result
