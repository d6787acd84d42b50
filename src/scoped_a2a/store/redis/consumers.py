"""The run queue's consumer names of workers that died, removed (``XGROUP DELCONSUMER``).

Each worker reads the ``runs`` stream as a consumer of the group ``workers`` under a name of
its own (``host:pid:random``), so every start adds a name, and Redis keeps a name until it is
deleted: without this, ``XINFO CONSUMERS`` grows by one per restart for ever.

When is a worker dead? Its process's liveness lease says (``store/liveness.py``): every process
that opens the store renews one, named ``host:pid:random`` too. A consumer whose ``host:pid``
has no current lease in the ``procs`` zset belongs to a process that died or stopped (Redis'
own idle time cannot tell: version 7.0 does not refresh it on a read that returns nothing).

Deleting a consumer drops its pending entries from the group (they stay in the stream, but no
worker would be handed them again): so a dead consumer is removed only once it has none. The
live workers' ``XAUTOCLAIM`` (:meth:`.queue.RunQueue.reclaim`) takes a dead worker's entries
once they have been idle for the claim time, which moves them to a live consumer; the next check
after that removes the name. The check and the removal are one script, so nothing pending can
be lost between them. A name that is not ``host:pid:random`` (a worker named by its caller) is
never removed.

Workers run :meth:`DeadConsumers.forget_dead` from their reclaim step, at most every
:data:`EVERY` seconds per process. Cancellation: the script runs whole or not at all. Errors:
ServerUnavailable.
"""

from __future__ import annotations

import logging
import time

from .connection import RedisConnection

log = logging.getLogger("scoped_a2a.redis.queue")

EVERY = 5.0
"""Seconds between two checks of one process."""

FORGET = """
-- KEYS: the runs stream, the processes zset (liveness leases).  ARGV: group
-- Removes the group's consumers whose process has no current lease and that have nothing
-- pending; returns their names.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = {}
for _, p in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf')) do
  local hp = string.match(p, '^(.+:%d+):[^:]+$')
  if hp then live[hp] = true end
end
local gone = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  local hp = string.match(f['name'], '^(.+:%d+):[^:]+$')
  if hp and not live[hp] and tonumber(f['pending']) == 0 then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    table.insert(gone, f['name'])
  end
end
return gone
"""


class DeadConsumers:
    """Removes the dead consumers of one queue's group (see the module)."""

    def __init__(self, conn: RedisConnection, stream: str, group: str) -> None:
        self.conn = conn
        self.stream = stream
        self.group = group
        self._script = conn.script(FORGET)
        self._next = 0.0

    async def forget_dead(self) -> list[str]:
        """Remove the consumers that died (at most every :data:`EVERY` s); their names."""
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + EVERY
        raw = await self.conn.run(self._script, [self.stream, self.conn.keys.processes],
                                  [self.group])
        names = [n if isinstance(n, str) else bytes(n).decode() for n in raw or ()]
        for name in names:
            log.info("removed the consumer %s of the run queue: its process's lease lapsed "
                     "and it had nothing pending", name)
        return names
