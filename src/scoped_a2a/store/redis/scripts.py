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
-- ARGV: id, snapshot, state, context id, timestamp, op, owner, claim key ('' none), the
--       task's claims set, the runs set of the process whose lease covers the run ('' none:
--       a queued run), [message, request metadata, reason]
-- Returns 1 created (or a retry of this create), 0 the task exists, -5 the claim is not
-- this task's any more (it expired while pending and another send took it).
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'op') == ARGV[6] then return 1 end
  return 0
end
if ARGV[8] ~= '' then
  if redis.call('HGET', ARGV[8], 'task') ~= ARGV[1] then return -5 end
  -- the claim now lives as long as its task (APPEND sets its expiry when the task ends)
  redis.call('HSET', ARGV[8], 'made', 1)
  redis.call('PERSIST', ARGV[8])
  redis.call('SADD', ARGV[9], ARGV[8])
end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'snap', ARGV[2], 'last', 0, 'state', ARGV[3], 'ctx', ARGV[4],
           'ts', ARGV[5], 'seq', seq, 'op', ARGV[6], 'attempts', 0, 'owner', ARGV[7])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
if ARGV[10] ~= '' then
  -- an interactive run: its process's lease covers it (store/liveness.py) until it ends
  redis.call('HSET', KEYS[1], 'proc', ARGV[10])
  redis.call('SADD', ARGV[10], ARGV[1])
end
if #KEYS >= 4 then
  redis.call('XADD', KEYS[4], '*', 'task', ARGV[1], 'msg', ARGV[11], 'meta', ARGV[12],
             'why', ARGV[13], 'who', ARGV[7])
end
return 1
"""

APPEND = _TERMINAL + """
-- KEYS: task hash, log stream, push hash, ended zset, tasks zset, lease
-- ARGV: expected last position, op, kind, event, snapshot ('' = unchanged), state, timestamp,
--       max events, ended ttl ms, max ended tasks, now ms, task id, lease token ('' = none),
--       the task's wake-up channel (gets the new position), key prefix, claim keep ms,
--       'later' if the batch announces the position (else this call does), then the kind and
--       event of each further event appended with the first, in order (store/redis/writer.py:
--       a run's pushed events of one batch); the snapshot and state are those after the last
-- Returns {code, position of the last event}: 1 appended, 2 already appended (retry), -1 no
-- such task, -2 task is terminal, -3 position moved on (re-read and retry), -4 the lease is
-- not ours. All the call's events are appended, or none.
local cur = redis.call('HMGET', KEYS[1], 'last', 'state', 'op', 'proc')
if not cur[1] then return {-1, 0} end
local last = tonumber(cur[1])
if cur[3] == ARGV[2] then return {2, last} end
local pos = tonumber(ARGV[1]) + 1
local more = (#ARGV - 17) / 2
local final = pos + more
if last >= pos then
  -- a resent batch: this append may be stored with later ones of its task (its op says)
  local e = redis.call('XRANGE', KEYS[2], pos .. '-0', pos .. '-0')
  if e[1] and e[1][2][6] == ARGV[2] then return {2, final} end
end
if TERMINAL[cur[2]] then return {-2, last} end
if ARGV[13] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[13] then return {-4, last} end
if last ~= pos - 1 then return {-3, last} end
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[8], pos .. '-0', 'k', ARGV[3], 'e', ARGV[4],
           'o', ARGV[2])
for i = 1, more do
  redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[8], (pos + i) .. '-0', 'k', ARGV[16 + 2 * i],
             'e', ARGV[17 + 2 * i], 'o', ARGV[2])
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'last', final, 'op', ARGV[2], 'snap', ARGV[5], 'state', ARGV[6],
             'ts', ARGV[7])
else
  redis.call('HSET', KEYS[1], 'last', final, 'op', ARGV[2])
end
if TERMINAL[ARGV[6]] then
  local ttl = tonumber(ARGV[9])
  local now = tonumber(ARGV[11])
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  -- the task's message claims outlive it by at least the claim window (docs/exactly-once.md)
  local claims = ARGV[15] .. 'claims:' .. ARGV[12]
  for _, claim in ipairs(redis.call('SMEMBERS', claims)) do
    redis.call('PEXPIRE', claim, ARGV[16])
  end
  redis.call('PEXPIRE', claims, ttl)
  -- its process's lease covers it no more (store/liveness.py)
  if cur[4] then redis.call('SREM', cur[4], ARGV[12]) end
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
      -- (its message claims keep their own expiry: a late resend is told the task is gone)
      redis.call('DEL', ARGV[15] .. 'task:' .. id, ARGV[15] .. 'log:' .. id,
                 ARGV[15] .. 'push:' .. id, ARGV[15] .. 'claims:' .. id)
      redis.call('ZREM', KEYS[5], id)
      redis.call('PUBLISH', ARGV[15] .. 'appended:' .. id, 'evicted')
    end
  end
end
-- the new position: a listener learns it without asking (store/redis/local.py); 'later': the
-- batch announces its last append to each task once (store/redis/batch.py)
if ARGV[17] ~= 'later' then redis.call('PUBLISH', ARGV[14], final) end
return {1, final}
"""

CLAIM_MESSAGE = _TERMINAL + """
-- KEYS: claim hash, task hash, the task's claims set
-- ARGV: fingerprint, task id, position, made (1: the task is stored), op, pending ms, keep ms
-- Returns false if claimed now (or by this very call, retried), else {fingerprint, task id,
-- position, made} of the claim that was there first.
local cur = redis.call('HMGET', KEYS[1], 'fp', 'task', 'pos', 'made', 'op')
if cur[1] then
  if cur[5] == ARGV[5] then return false end
  return {cur[1], cur[2], cur[3], cur[4]}
end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'task', ARGV[2], 'pos', ARGV[3], 'made', ARGV[4],
           'op', ARGV[5])
if ARGV[4] == '1' then
  local state = redis.call('HGET', KEYS[2], 'state')
  if state and not TERMINAL[state] then
    redis.call('SADD', KEYS[3], KEYS[1])  -- expires with the task (APPEND)
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
  end
else
  -- pending: CREATE makes it last; a sender that died before storing its task lets it go
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
return false
"""

CONFIRM_MESSAGE = _TERMINAL + """
-- KEYS: claim hash, task hash, the task's claims set.  ARGV: task id, keep ms
-- Makes a pending follow-up claim (its message is being delivered). Returns 1, or 0 if the claim
-- is not this task's (it lapsed meanwhile).
if redis.call('HGET', KEYS[1], 'task') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'made', 1)
local state = redis.call('HGET', KEYS[2], 'state')
if state and not TERMINAL[state] then
  redis.call('PERSIST', KEYS[1])
  redis.call('SADD', KEYS[3], KEYS[1])  -- expires with the task (APPEND)
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
"""

RECLAIM_MESSAGE = """
-- KEYS: claim hash.  ARGV: old task id, new task id, op, pending ms
-- Returns false if the claim now names the new (pending) task, else {fingerprint, task id,
-- position, made} as it is ({'', '', 0, 0} if there is no claim any more).
local cur = redis.call('HMGET', KEYS[1], 'fp', 'task', 'pos', 'made', 'op')
if not cur[1] then return {'', '', '0', '0'} end
if cur[2] == ARGV[2] and cur[5] == ARGV[3] then return false end  -- a retry of this call
if cur[2] ~= ARGV[1] then return {cur[1], cur[2], cur[3], cur[4]} end
redis.call('HSET', KEYS[1], 'task', ARGV[2], 'pos', 0, 'made', 0, 'op', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return false
"""

RELEASE_MESSAGE = """
-- KEYS: claim hash, the task's claims set, task hash.  ARGV: task id
-- Drops the claim of a send that failed, unless it is the made claim of a queued run's task:
-- a CREATE whose reply was lost looks failed to its sender, yet the run it queued will
-- execute, so the resend must find that task, not run the message a second time. An
-- interactive task (its hash names the process whose lease covers it) has no run once its
-- sender failed: its claim goes, and the resend runs the message as a new task. A pending
-- claim (a follow-up's, or a task never stored) goes. Returns 1 dropped, 0 kept.
local cur = redis.call('HMGET', KEYS[1], 'task', 'made')
if cur[1] ~= ARGV[1] then return 0 end
if cur[2] == '1' and redis.call('EXISTS', KEYS[3]) == 1
   and not redis.call('HGET', KEYS[3], 'proc') then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], KEYS[1])
return 1
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

# --- liveness leases of interactive runs (store/liveness.py, store/redis/leases.py) ---------
# Times are Redis' own (TIME), so the clocks of the processes' machines do not matter.

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

HEARTBEAT = _NOW + """
-- KEYS: processes zset (process id -> lease expiry, ms).  ARGV: process id, lease ms, first
-- Returns 1 renewed, 0 renewed but it had lapsed (its runs may have been recorded lost).
local prev = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if ARGV[3] == '1' or (prev and tonumber(prev) >= now) then return 1 end
return 0
"""

LAPSED = _TERMINAL + _NOW + """
-- KEYS: processes zset.  ARGV: key prefix, reaper id, hand-out ms, max tasks, max processes,
-- the reason sent with each cancel request
-- Returns {process id, {task id, ...}, ...}: lapsed processes handed to this caller (for
-- hand-out ms) with running tasks; forgets lapsed processes with none (and ended task ids).
local out = {}
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
for _, p in ipairs(dead) do
  local set = ARGV[1] .. 'proc:' .. p
  local ids = redis.call('SRANDMEMBER', set, tonumber(ARGV[4]))
  local running = {}
  for _, id in ipairs(ids) do
    local state = redis.call('HGET', ARGV[1] .. 'task:' .. id, 'state')
    if state and not TERMINAL[state] then
      table.insert(running, id)
    else
      redis.call('SREM', set, id)  -- ended (or expired) without its set hearing of it
    end
  end
  if #running == 0 and redis.call('SCARD', set) == 0 then
    redis.call('ZREM', KEYS[1], p)
    redis.call('DEL', set, ARGV[1] .. 'reaping:' .. p)
  elseif #running > 0 and redis.call('SET', ARGV[1] .. 'reaping:' .. p, ARGV[2], 'NX', 'PX',
                                      ARGV[3]) then
    table.insert(out, p)
    table.insert(out, running)
    for _, id in ipairs(running) do
      -- a process that is alive after all (a partition) stops the run at once, and records
      -- it with the lost-process reason (store/liveness.py: cancel_reason)
      redis.call('PUBLISH', ARGV[1] .. 'cancel', id .. '\\n' .. ARGV[6])
    end
  end
end
return out
"""

RETIRE_PROCESS = """
-- KEYS: processes zset, the process's runs set.  ARGV: process id
-- Forgets the process unless runs are still registered to it (then its lease lapses).
if redis.call('SCARD', KEYS[2]) > 0 then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""
