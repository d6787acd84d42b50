"""The Lua scripts behind the Redis store and run queue (no I/O here: sources only).

Each script is one atomic step, so every rule that must never bend is checked where the write
happens: a terminal task refuses every further event (``APPEND``), a task and its queued run are
stored together or not at all (``CREATE``), a run's lease is taken by one worker at a time
(``CLAIM``). Writes carry an operation id (``op``) so that a command retried after a lost reply
is recognised and not applied twice (as long as it is still the task's latest write).

Keys of other tasks are built inside ``APPEND`` (eviction of the oldest ended tasks), so these
scripts target a single Redis (or Sentinel-managed primary), not Redis Cluster.
"""

from __future__ import annotations

from ...protocol.types import TaskState

# A Lua set of the terminal state names, generated from the one definition of "terminal".
_TERMINAL = (
    "local TERMINAL = {"
    + ", ".join(f"[{s.value!r}] = true" for s in TaskState if s.terminal)
    + "}\n"
)

CREATE = """
-- KEYS: task hash, tasks zset, seq counter, [run queue stream]
-- ARGV: id, snapshot, state, context id, timestamp, op, owner,
--       [message, request metadata, reason]
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'op') == ARGV[6] then return 1 end
  return 0
end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'snap', ARGV[2], 'last', 0, 'state', ARGV[3], 'ctx', ARGV[4],
           'ts', ARGV[5], 'seq', seq, 'op', ARGV[6], 'attempts', 0, 'owner', ARGV[7])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
if #KEYS >= 4 then
  redis.call('XADD', KEYS[4], '*', 'task', ARGV[1], 'msg', ARGV[8], 'meta', ARGV[9],
             'why', ARGV[10], 'who', ARGV[7])
end
return 1
"""

APPEND = _TERMINAL + """
-- KEYS: task hash, log stream, push hash, ended zset, tasks zset, lease
-- ARGV: expected last position, op, kind, event, snapshot ('' = unchanged), state, timestamp,
--       max events, ended ttl ms, max ended tasks, now ms, task id, lease token ('' = none),
--       the task's wake-up channel (gets the new position), key prefix
-- Returns {code, position}: 1 appended, 2 already appended (retry), -1 no such task,
-- -2 task is terminal, -3 position moved on (re-read and retry), -4 the lease is not ours.
local cur = redis.call('HMGET', KEYS[1], 'last', 'state', 'op')
if not cur[1] then return {-1, 0} end
local last = tonumber(cur[1])
if cur[3] == ARGV[2] then return {2, last} end
if TERMINAL[cur[2]] then return {-2, last} end
if ARGV[13] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[13] then return {-4, last} end
if last ~= tonumber(ARGV[1]) then return {-3, last} end
local pos = last + 1
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[8], pos .. '-0', 'k', ARGV[3], 'e', ARGV[4])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'last', pos, 'op', ARGV[2], 'snap', ARGV[5], 'state', ARGV[6],
             'ts', ARGV[7])
else
  redis.call('HSET', KEYS[1], 'last', pos, 'op', ARGV[2])
end
if TERMINAL[ARGV[6]] then
  local ttl = tonumber(ARGV[9])
  local now = tonumber(ARGV[11])
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('ZADD', KEYS[4], now, ARGV[12])
  -- forget ended tasks whose keys expired on their own
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - ttl, 'LIMIT', 0, 100)
  for _, id in ipairs(gone) do
    redis.call('ZREM', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
  end
  -- keep at most max ended tasks: evict the oldest-ended first
  local extra = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[10])
  if extra > 0 then
    local old = redis.call('ZPOPMIN', KEYS[4], extra)
    for i = 1, #old, 2 do
      local id = old[i]
      redis.call('DEL', ARGV[15] .. 'task:' .. id, ARGV[15] .. 'log:' .. id,
                 ARGV[15] .. 'push:' .. id)
      redis.call('ZREM', KEYS[5], id)
      redis.call('PUBLISH', ARGV[15] .. 'appended:' .. id, 'evicted')
    end
  end
end
-- the new position: a listener learns it without asking (store/redis/local.py)
redis.call('PUBLISH', ARGV[14], pos)
return {1, pos}
"""

READ = """
-- KEYS: task hash, log stream.
-- ARGV: first stream id to return, max entries (0: none), SHA1 of the snapshot the reader
--       holds ('' none). Returns {snapshot ('' if the reader holds it), position, entries}.
local cur = redis.call('HMGET', KEYS[1], 'snap', 'last')
if not cur[1] then return false end
local snap = cur[1]
if ARGV[3] ~= '' and redis.sha1hex(snap) == ARGV[3] then snap = '' end
local entries = {}
if tonumber(ARGV[2]) > 0 then
  entries = redis.call('XRANGE', KEYS[2], ARGV[1], '+', 'COUNT', ARGV[2])
end
return {snap, cur[2], entries}
"""

PUSH_SET = """
-- KEYS: task hash, push hash.  ARGV: config id, config JSON
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
"""

PUSH_LIST = """
-- KEYS: task hash, push hash
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('HVALS', KEYS[2])
"""

PUSH_DELETE = """
-- KEYS: task hash, push hash.  ARGV: config id
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('HDEL', KEYS[2], ARGV[1])
"""

CLAIM = _TERMINAL + """
-- KEYS: task hash, lease.  ARGV: token, lease ms
-- Returns {attempt, snapshot, position} with the lease taken (attempt >= 1), or {0} if the
-- task already ended, {-1} if it is gone, {-2} if another worker holds its lease.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {-1} end
if TERMINAL[state] then return {0} end
local n
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
elseif redis.call('GET', KEYS[2]) == ARGV[1] then
  n = tonumber(redis.call('HGET', KEYS[1], 'attempts'))  -- a retried claim
else
  return {-2}
end
local cur = redis.call('HMGET', KEYS[1], 'snap', 'last')
return {n, cur[1], cur[2]}
"""

RENEW = _TERMINAL + """
-- KEYS: lease, run queue stream, task hash.  ARGV: token, lease ms, group, consumer, entry id
-- Returns 1 (still ours, task running), 0 (still ours, task ended), -1 (lease lost).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- reset the entry's idle time so no other worker reclaims it while we run it
redis.call('XCLAIM', KEYS[2], ARGV[3], ARGV[4], 0, ARGV[5], 'JUSTID')
local state = redis.call('HGET', KEYS[3], 'state')
if (not state) or TERMINAL[state] then return 0 end
return 1
"""

RETIRE = _TERMINAL + """
-- KEYS: task hash, run queue stream, lease.  ARGV: group, entry id, token
-- Drops our lease; acknowledges and deletes the entry if the run's end is recorded (or the
-- task is gone). Returns 1 if retired, 0 if the entry stays queued for redelivery.
local state = redis.call('HGET', KEYS[1], 'state')
if redis.call('GET', KEYS[3]) == ARGV[3] then redis.call('DEL', KEYS[3]) end
if state and not TERMINAL[state] then return 0 end
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
return 1
"""

RELEASE = """
-- KEYS: lease.  ARGV: token
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
