"""Liveness leases on Redis (:class:`~scoped_a2a.store.liveness.ProcessLeases`).

A zset ``<prefix>:procs`` maps each process id to the time its lease runs out (Redis' own
clock, ms); a set ``<prefix>:proc:<id>`` holds the running tasks its lease covers. CREATE adds a
task stored for an interactive run to its process's set (and names the set in the task's hash),
APPEND removes it when the task ends: no command of its own per run. The heartbeat is one ZADD
per process and period (:data:`.scripts.HEARTBEAT`); :data:`.scripts.LAPSED` hands a lapsed
process to one reaper at a time (a ``reaping:<id>`` key for half a lease: a reaper that died is
replaced soon, and a second batch of a large set goes out quickly) and forgets the process once
none of its tasks runs.

Cancellation: each call is one script run (:meth:`.connection.RedisConnection.run`), applied
whole or not at all.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..liveness import DEFAULT_LEASE, LOST_REASON
from . import scripts
from .connection import RedisConnection

ALIVE = """
-- KEYS: processes zset.  ARGV: process ids.  Returns 1 per current lease, 0 otherwise.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i, p in ipairs(ARGV) do
  local exp = redis.call('ZSCORE', KEYS[1], p)
  out[i] = (exp and tonumber(exp) >= now) and 1 or 0
end
return out
"""

MAX_TASKS = 1000
"""Tasks of one lapsed process handed out per check (the next check gets the rest)."""


class RedisLeases:
    """The liveness lease of one process on one Redis."""

    def __init__(self, conn: RedisConnection, lease: float = DEFAULT_LEASE) -> None:
        if lease <= 0:
            raise ValueError("the lease must be positive")
        self.conn = conn
        self.lease = lease
        self.process_id = conn.process_id
        self.runs_key = conn.keys.process(self.process_id)
        """The set CREATE adds this process's interactive tasks to."""
        self._beat = conn.script(scripts.HEARTBEAT)
        self._lapsed = conn.script(scripts.LAPSED)
        self._retire = conn.script(scripts.RETIRE_PROCESS)
        self._alive = conn.script(ALIVE)
        self._first = True

    @property
    def renewed(self) -> bool:
        """Whether this process's lease was renewed at least once (Redis was reached)."""
        return not self._first

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease * 1000))

    async def beat(self) -> bool:
        args: list[Any] = [self.process_id, self._lease_ms, 1 if self._first else 0]
        ok = await self.conn.run(self._beat, [self.conn.keys.processes], args)
        self._first = False  # renewed at least once: retire() has something to forget
        return bool(ok == 1)

    async def lapsed(self) -> list[tuple[str, list[str]]]:
        raw = await self.conn.run(
            self._lapsed, [self.conn.keys.processes],
            [self.conn.keys.base, self.process_id, self._lease_ms // 2, MAX_TASKS, 20,
             LOST_REASON])
        out: list[tuple[str, list[str]]] = []
        for i in range(0, len(raw or ()), 2):
            out.append((bytes(raw[i]).decode(), [bytes(t).decode() for t in raw[i + 1]]))
        return out

    async def covers(self, task_id: str) -> bool:
        key = self.conn.keys.task(task_id)
        return bool(await self.conn.call(lambda: self.conn.client.hexists(key, "proc")))

    async def alive(self, process_ids: Collection[str]) -> set[str]:
        ids = list(process_ids)
        if not ids:
            return set()
        raw = await self.conn.run(self._alive, [self.conn.keys.processes], ids)
        return {i for i, ok in zip(ids, raw or (), strict=False) if ok == 1}

    async def retire(self) -> None:
        await self.conn.run(self._retire, [self.conn.keys.processes, self.runs_key],
                            [self.process_id])
