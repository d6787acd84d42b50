"""Push watches that outlive their process, on Redis
(:class:`~scoped_a2a.store.push_watches.PushWatches`).

Layout, under the store's prefix: a hash ``pushw`` (watch -> owner process id, ``''`` once
released), a hash ``pushw:at`` (watch -> its progress, ``cursor\\nstate\\nv1``), a set
``pushw:of:<process>`` per owner (its watches), a set ``pushw:owners`` (the processes that own
some), and a set ``pushw:free`` (released watches). A watch is named ``task id\\nconfig id``
(neither may hold a control character). Whether an owner is alive is read from the liveness
leases' zset (``procs``, :mod:`.leases`): a process absent from it, or whose lease ran out by
Redis' clock, has lapsed.

Each call is one Lua script, applied whole or not at all. :data:`ADOPT` remembers its last
answer per process for a minute under the batch id it was called with, so a call retried after
a lost reply gets the same watches back instead of leaving them adopted and unwatched: the
batch id changes only once an answer has arrived, so the next adoption after one that raised
is that retry.

Cancellation: a cancelled call either ran or not. Errors: ServerUnavailable.
"""

from __future__ import annotations

from typing import Any

from ...protocol.ids import new_id
from ..push_watches import Pending, Progress
from .connection import RedisConnection
from .leases import RedisLeases

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

OWN = _NOW + """
-- KEYS: pushw, pushw:at, procs, pushw:free, pushw:owners.  ARGV: watch, me, progress, base
-- Returns the progress to watch from, or false if a live process owns the watch.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur == ARGV[2] then return redis.call('HGET', KEYS[2], ARGV[1]) or ARGV[3] end
local at = ARGV[3]
if cur then
  if cur ~= '' then
    local exp = redis.call('ZSCORE', KEYS[3], cur)
    if exp and tonumber(exp) >= now then return false end
    redis.call('SREM', ARGV[4] .. 'pushw:of:' .. cur, ARGV[1])
  end
  at = redis.call('HGET', KEYS[2], ARGV[1]) or ARGV[3]
  redis.call('SREM', KEYS[4], ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], at)
redis.call('SADD', ARGV[4] .. 'pushw:of:' .. ARGV[2], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[2])
return at
"""

PROGRESS = """
-- KEYS: pushw, pushw:at.  ARGV: watch, me, progress.  Returns 1 recorded, 0 not ours.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""

DONE = """
-- KEYS: pushw, pushw:at, pushw:free, pushw:owners.  ARGV: watch, me, base
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur ~= ARGV[2] and cur ~= '' then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
local mine = ARGV[3] .. 'pushw:of:' .. ARGV[2]
redis.call('SREM', mine, ARGV[1])
if redis.call('SCARD', mine) == 0 then redis.call('SREM', KEYS[4], ARGV[2]) end
return 1
"""

RELEASE = """
-- KEYS: pushw, pushw:free, pushw:owners.  ARGV: me, base, watch...
local mine = ARGV[2] .. 'pushw:of:' .. ARGV[1]
for i = 3, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[1] then
    redis.call('HSET', KEYS[1], ARGV[i], '')
    redis.call('SREM', mine, ARGV[i])
    redis.call('SADD', KEYS[2], ARGV[i])
  end
end
if redis.call('SCARD', mine) == 0 then redis.call('SREM', KEYS[3], ARGV[1]) end
return 1
"""

ADOPT = _NOW + """
-- KEYS: pushw, pushw:at, pushw:free, pushw:owners, procs.  ARGV: me, limit, base, batch id
-- Returns {watch, progress, ...}: released watches, then those of lapsed owners, now ours.
local memo = ARGV[3] .. 'pushw:batch:' .. ARGV[1]
local prev = redis.call('GET', memo)
if prev and string.sub(prev, 1, #ARGV[4] + 1) == ARGV[4] .. '\\n' then
  return cjson.decode(string.sub(prev, #ARGV[4] + 2))
end
local limit = tonumber(ARGV[2])
local out = {}
local mine = ARGV[3] .. 'pushw:of:' .. ARGV[1]
local function take(w)
  redis.call('HSET', KEYS[1], w, ARGV[1])
  redis.call('SADD', mine, w)
  table.insert(out, w)
  table.insert(out, redis.call('HGET', KEYS[2], w) or '')
end
for _, w in ipairs(redis.call('SPOP', KEYS[3], limit)) do
  if redis.call('HGET', KEYS[1], w) == '' then take(w) end
end
for _, p in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  if #out / 2 >= limit then break end
  if p ~= ARGV[1] then
    local exp = redis.call('ZSCORE', KEYS[5], p)
    if not exp or tonumber(exp) < now then
      local theirs = ARGV[3] .. 'pushw:of:' .. p
      for _, w in ipairs(redis.call('SPOP', theirs, limit - #out / 2)) do
        if redis.call('HGET', KEYS[1], w) == p then take(w) end
      end
      if redis.call('SCARD', theirs) == 0 then redis.call('SREM', KEYS[4], p) end
    end
  end
end
if #out > 0 then redis.call('SADD', KEYS[4], ARGV[1]) end
redis.call('SET', memo, ARGV[4] .. '\\n' .. cjson.encode(out), 'PX', 60000)
return out
"""


def _name(task_id: str, config_id: str) -> str:
    return f"{task_id}\n{config_id}"


def _progress(p: Progress) -> str:
    cursor, state, v1 = p
    return f"{cursor}\n{state}\n{1 if v1 else 0}"


def _parse(raw: Any, default: Progress) -> Progress:
    text = bytes(raw).decode() if raw else ""
    parts = text.split("\n")
    if len(parts) != 3:
        return default
    return int(parts[0]), parts[1], parts[2] == "1"


class RedisPushWatches:
    """The push watches of one process on one Redis."""

    def __init__(self, conn: RedisConnection, leases: RedisLeases) -> None:
        self.conn = conn
        self.process_id = leases.process_id
        self.period = leases.lease / 3
        base = conn.keys.base
        self._base = base
        self._owners, self._at = f"{base}pushw", f"{base}pushw:at"
        self._free, self._owner_set = f"{base}pushw:free", f"{base}pushw:owners"
        self._procs = conn.keys.processes
        self._own = conn.script(OWN)
        self._progress = conn.script(PROGRESS)
        self._done = conn.script(DONE)
        self._release = conn.script(RELEASE)
        self._adopt = conn.script(ADOPT)
        self._batch = new_id()  # kept until an adoption is answered (ADOPT's memo)

    async def own(self, task_id: str, config_id: str, progress: Progress) -> Progress | None:
        raw = await self.conn.run(
            self._own, [self._owners, self._at, self._procs, self._free, self._owner_set],
            [_name(task_id, config_id), self.process_id, _progress(progress), self._base])
        return None if raw is None else _parse(raw, progress)

    async def progress(self, task_id: str, config_id: str, progress: Progress) -> bool:
        ok = await self.conn.run(self._progress, [self._owners, self._at],
                                 [_name(task_id, config_id), self.process_id,
                                  _progress(progress)])
        return bool(ok)

    async def done(self, task_id: str, config_id: str) -> None:
        await self.conn.run(self._done, [self._owners, self._at, self._free, self._owner_set],
                            [_name(task_id, config_id), self.process_id, self._base])

    async def release(self, watches: list[tuple[str, str]]) -> None:
        if watches:
            await self.conn.run(self._release, [self._owners, self._free, self._owner_set],
                                [self.process_id, self._base,
                                 *(_name(t, c) for t, c in watches)])

    async def adopt(self, limit: int) -> list[Pending]:
        raw = await self.conn.run(
            self._adopt, [self._owners, self._at, self._free, self._owner_set, self._procs],
            [self.process_id, limit, self._base, self._batch])
        self._batch = new_id()
        out: list[Pending] = []
        items = list(raw or ())
        for i in range(0, len(items) - 1, 2):
            name = items[i] if isinstance(items[i], str) else bytes(items[i]).decode()
            task_id, _, config_id = name.partition("\n")
            at = items[i + 1]
            cursor, state, v1 = _parse(at.encode() if isinstance(at, str) else at,
                                       (0, "", True))
            if state:
                out.append((task_id, config_id, cursor, state, v1))
        return out
