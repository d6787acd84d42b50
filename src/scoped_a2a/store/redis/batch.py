"""Script calls coalesced: every script call of a process that arrives while one is in flight
goes to Redis with the others, in one call of one script (one round trip for many).

Why. A blocking send costs a claim, a create and three appends, a stream event one append:
each one round trip, and each a wake-up of Redis and of this process. Under load many of them
are ready at the same moment, for different tasks. As the SQLite store commits a batch of
writes in one transaction, this module sends every queued call together.

How. :data:`BATCH` is one Lua script holding each script of :mod:`.scripts` as a function; its
arguments list the calls (which script, its keys, its arguments), and it runs them one after
the other, in the order they were submitted, and returns each one's reply. Each call keeps the
semantics it has alone (its checks happen where its writes do); a Lua error in one call is
that call's error only (``pcall``). One batch is in flight at a time: calls that arrive
meanwhile are the next batch (at most :data:`MAX_BATCH` calls each), so a lone caller pays
no wait and a crowd pays one round trip per batch. Redis' ``INFO commandstats`` counts one
``evalsha`` per batch.

Acknowledgement. A caller gets its reply only once Redis has executed its call (an append is
acknowledged only once stored). If the batch fails (Redis unreachable after one retry, or an
error), every call in it gets the same ``ServerUnavailable``; what a call wrote is not undone
(a script is not a transaction), but every write carries an op id (:mod:`.scripts`), so a
resend is recognised, as after any lost reply.

Cancellation. A caller cancelled before its batch is sent withdraws its call (nothing is
written); once sent, the call completes in Redis and the caller's cancellation is delivered at
once. The batching loop runs in the connection's task group; when it ends (the connection
closes), calls still waiting, and those of a batch cut short, get ``ServerUnavailable`` (a call
cut short may have been executed: as after any lost reply, its op id recognises a resend).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from coredis.commands.script import Script

from ...protocol.errors import ServerUnavailable
from . import scripts

MAX_BATCH = 256
"""Calls per batch, at most (bounds the time Redis spends in one script)."""

_ERROR = b"\x00error"  # first element of the reply of a call that raised a Lua error

SCRIPTS: tuple[str, ...] = (
    scripts.CREATE, scripts.APPEND, scripts.READ, scripts.CLAIM_MESSAGE,
    scripts.CONFIRM_MESSAGE, scripts.RECLAIM_MESSAGE, scripts.RELEASE_MESSAGE,
    scripts.PUSH_SET, scripts.PUSH_LIST, scripts.PUSH_DELETE, scripts.CLAIM, scripts.RENEW,
    scripts.RETIRE, scripts.RELEASE, scripts.HEARTBEAT, scripts.LAPSED,
    scripts.RETIRE_PROCESS,
)
"""Every script the store runs, each a function of :data:`BATCH` (numbered from 1)."""

BATCH = (
    "local calls = {\n"
    + "".join(f"function(KEYS, ARGV)\n{source}\nend,\n" for source in SCRIPTS)
    + """}
-- ARGV: n, then per call (script number, number of keys, number of arguments), then every
-- call's arguments in order; KEYS: every call's keys in order. Returns one reply per call.
local n = tonumber(ARGV[1])
local out = {}
local k, a = 0, 1 + 3 * n
for i = 1, n do
  local h = 1 + 3 * (i - 1)
  local nk, na = tonumber(ARGV[h + 2]), tonumber(ARGV[h + 3])
  local keys, args = {}, {}
  for j = 1, nk do keys[j] = KEYS[k + j] end
  for j = 1, na do args[j] = ARGV[a + j] end
  k, a = k + nk, a + na
  local ok, reply = pcall(calls[tonumber(ARGV[h + 1])], keys, args)
  if not ok then
    if type(reply) == 'table' and reply.err then reply = reply.err end
    reply = {'\\0error', tostring(reply)}
  elseif reply == nil then
    reply = false
  end
  out[i] = reply
end
return out
"""
)


class _Call:
    __slots__ = ("args", "done", "error", "keys", "reply", "sent", "which")

    def __init__(self, which: int, keys: list[str], args: list[Any]) -> None:
        self.which, self.keys, self.args = which, keys, args
        self.done = anyio.Event()
        self.sent = False
        self.reply: Any = None
        self.error: BaseException | None = None


class Batcher:
    """Coalesces the script calls of one connection (see the module docstring).

    ``call`` runs one command with the connection's deadline, retry and error translation
    (:meth:`.connection.RedisConnection.call`); ``script`` is :data:`BATCH`, registered.
    """

    def __init__(self, call: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
                 script: Script[bytes]) -> None:
        self._call = call
        self._script = script
        self._index = {source: i for i, source in enumerate(SCRIPTS, 1)}
        self._queue: list[_Call] = []
        self._wake = anyio.Event()
        self._running = True  # from the start: the connection starts run() before any call
        self.batches = 0
        """Batches sent so far (each one script call, one round trip)."""

    def handles(self, source: str) -> bool:
        return source in self._index

    async def submit(self, source: str, keys: list[str], args: list[Any]) -> Any:
        """Run the script ``source`` with ``keys`` and ``args`` in the next batch; its reply.

        Raises ServerUnavailable if the batch fails or the loop is not running.
        """
        if not self._running:
            raise _closed()
        call = _Call(self._index[source], keys, args)
        self._queue.append(call)
        self._wake.set()
        try:
            await call.done.wait()
        except BaseException:
            if not call.sent:  # withdrawn: nothing was written
                self._queue.remove(call)
            raise
        if call.error is not None:
            raise call.error
        return call.reply

    async def run(self) -> None:
        """Send batch after batch until cancelled; then fail the calls still waiting."""
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                while self._queue:
                    batch = self._queue[:MAX_BATCH]
                    del self._queue[:MAX_BATCH]
                    await self._send(batch)
        finally:
            self._running = False
            _fail(self._queue, _closed())
            self._queue.clear()

    async def _send(self, batch: list[_Call]) -> None:
        keys: list[str] = []
        head: list[Any] = [len(batch)]
        args: list[Any] = []
        for call in batch:
            call.sent = True
            head += (call.which, len(call.keys), len(call.args))
            keys += call.keys
            args += call.args
        argv = head + args
        try:
            replies = await self._call(lambda: self._script(keys, argv))
        except ServerUnavailable as exc:
            _fail(batch, exc)
            return
        except BaseException:  # the connection is closing: the batch may or may not have run
            _fail(batch, _closed())
            raise
        self.batches += 1
        for call, reply in zip(batch, replies, strict=True):
            if isinstance(reply, list) and len(reply) == 2 and reply[0] == _ERROR:
                message = bytes(reply[1]).decode(errors="replace")
                call.error = ServerUnavailable(f"the task store failed: {message}")
            else:
                call.reply = reply
            call.done.set()


def _closed() -> ServerUnavailable:
    return ServerUnavailable("the task store's connection closed; try again later")


def _fail(calls: list[_Call], error: ServerUnavailable) -> None:
    for call in calls:
        call.error = error
        call.done.set()
