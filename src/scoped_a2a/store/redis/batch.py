"""Script calls coalesced: every script call of a process that arrives while one is in flight
goes to Redis with the others, in one call of one script (one round trip for many).

Why. A blocking send costs a claim, a create and three appends, a stream event one append:
each one round trip, and each a wake-up of Redis and of this process. Under load many of them
are ready at the same moment, for different tasks. As the SQLite store commits a batch of
writes in one transaction, this module sends every queued call together.

How. :data:`BATCH` is one Lua script holding each script of :mod:`.scripts` as a function; its
arguments list the calls (which script, its keys, its arguments), and it runs them one after
the other, in the order they were submitted, and returns each one's reply. Each call keeps the
semantics it has alone (its checks happen where its writes do; it names its keys in its
arguments, which is why the store needs one Redis, not a Cluster); a Lua error in one call is
that call's error only (``pcall``). One batch is in flight at a time: calls that arrive
meanwhile are the next batch (at most :data:`MAX_BATCH` calls each), so a lone caller pays
no wait and a crowd pays one round trip per batch. Redis' ``INFO commandstats`` counts one
``evalsha`` per batch.

Deferred calls. A pushed call may be *deferred* (:meth:`Batcher.defer`): its keys and
arguments are made as its batch is sent, so what its maker adds meanwhile travels in it (the
writer gathers a run's events so: one call, one snapshot, for all of them).

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

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from coredis.commands.script import Script

from ...protocol.errors import ServerUnavailable
from . import scripts

MAX_BATCH = 256
"""Calls per batch, at most (bounds the time Redis spends in one script)."""
HOLD_TURNS = 8
"""Turns of the event loop a batch of pushed calls alone waits for more before it is sent."""

log = logging.getLogger("scoped_a2a.redis")
_pack = msgspec.msgpack.Encoder().encode
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
    f"local APPEND = {SCRIPTS.index(scripts.APPEND) + 1}\n"
    "local calls = {\n"
    + "".join(f"function(KEYS, ARGV)\n{source}\nend,\n" for source in SCRIPTS)
    + """}
-- ARGV[1]: the calls, MessagePack: {{script number, {keys}, {arguments}}, ...} (one argument
-- for Redis to take, not hundreds). Returns one reply per call.
local out = {}
local news = {}  -- the wake-up channel of each task appended to -> its last position
for i, call in ipairs(cmsgpack.unpack(ARGV[1])) do
  local args = call[3]
  for j, arg in ipairs(args) do
    if string.byte(arg, 1) == 0 then  -- binary, in hex (batch._text)
      args[j] = arg:sub(3):gsub('..', function(h) return string.char(tonumber(h, 16)) end)
    end
  end
  local append = call[1] == APPEND
  if append then args[17] = 'later' end
  local ok, reply = pcall(calls[call[1]], call[2], args)
  if not ok then
    if type(reply) == 'table' and reply.err then reply = reply.err end
    reply = {'\\0error', tostring(reply)}
  elseif reply == nil then
    reply = false
  elseif append and reply[1] > 0 then
    news[args[14]] = reply[2]
  end
  out[i] = reply
end
-- one announcement per task and batch, of its last position, whoever listens (the writer's
-- own listener too: counting listeners cost more than a PUBLISH to none, and a count that
-- left the writer out would miss another process's follower while Redis had dropped the
-- writer's subscription unnoticed)
for channel, last in pairs(news) do
  redis.call('PUBLISH', channel, last)
end
return out
"""
)


Done = Callable[[Any, Exception | None], None]
"""Called with a pushed call's reply, or its error (:meth:`Batcher.push`)."""
Build = Callable[[], tuple[list[str], list[Any]]]
"""Makes a deferred call's keys and arguments as its batch is sent (:meth:`Batcher.defer`)."""


class _Call:
    __slots__ = ("args", "build", "done", "error", "keys", "on_done", "reply", "sent", "which")

    def __init__(self, which: int, keys: list[str], args: list[Any],
                 on_done: Done | None = None, build: Build | None = None) -> None:
        self.which, self.keys, self.args = which, keys, args
        # Only a caller that waits needs an event (a pushed call has on_done): making one per
        # pushed event cost a tenth of the append path.
        self.done: anyio.Event | None = anyio.Event() if on_done is None else None
        self.on_done = on_done
        self.build = build
        self.sent = False
        self.reply: Any = None
        self.error: Exception | None = None

    def finish(self) -> None:
        if self.on_done is None:
            assert self.done is not None
            self.done.set()
            return
        try:
            self.on_done(self.reply, self.error)
        except Exception:  # a bug there must not stop every other call's batches
            log.exception("a batched call's completion failed")


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
        self._urgent = False  # a caller waits for a queued call (submit): send without holding
        self.batches = 0
        """Batches sent so far (each one script call, one round trip)."""

    async def submit(self, script: Script[bytes], keys: list[str], args: list[Any]) -> Any:
        """Run ``script`` (one of :data:`SCRIPTS`) with ``keys`` and ``args`` in the next
        batch; its reply.

        Raises ServerUnavailable if the batch fails or the loop is not running.
        """
        if not self._running:
            raise _closed()
        call = self._queued(script, keys, args, None)
        assert call.done is not None
        try:
            await call.done.wait()
        except BaseException:
            if not call.sent:  # withdrawn: nothing was written
                self._queue.remove(call)
            raise
        if call.error is not None:
            raise call.error
        return call.reply

    def push(self, script: Script[bytes], keys: list[str], args: list[Any], on_done: Done
             ) -> None:
        """Queue a call whose caller does not wait: ``on_done`` gets its reply or its error
        (ServerUnavailable if the connection is closed) once its batch returned."""
        if not self._running:
            on_done(None, _closed())
            return
        self._queued(script, keys, args, on_done)

    def defer(self, script: Script[bytes], build: Build, on_done: Done) -> None:
        """Queue a pushed call (as :meth:`push`) whose keys and arguments ``build`` makes when
        its batch is sent, not now: what is added to it until then goes in the same call
        (:mod:`.writer` gathers a run's events so). ``build`` runs without awaiting, once, and
        only if the call is sent; ``on_done`` runs in every case."""
        if not self._running:
            on_done(None, _closed())
            return
        call = _Call(self._index[_source(script)], [], [], on_done, build)
        self._queue.append(call)
        self._wake.set()

    def _queued(self, script: Script[bytes], keys: list[str], args: list[Any],
                on_done: Done | None) -> _Call:
        call = _Call(self._index[_source(script)], keys, _texts(args), on_done)
        self._queue.append(call)
        if on_done is None:
            self._urgent = True
        self._wake.set()
        return call

    def handles(self, script: Script[bytes]) -> bool:
        return _source(script) in self._index

    async def run(self) -> None:
        """Send batch after batch until cancelled; then fail the calls still waiting."""
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                # Pushed calls alone (a run's events, nobody waiting for them) wait a few turns
                # of the loop for what follows them, as a run's next events and its end
                # (waited for) come right after: one round trip for them all, not two.
                for _ in range(HOLD_TURNS):
                    if self._urgent or len(self._queue) >= MAX_BATCH:
                        break
                    await anyio.lowlevel.checkpoint()
                while self._queue:
                    batch = self._queue[:MAX_BATCH]
                    del self._queue[:MAX_BATCH]
                    self._urgent = any(call.on_done is None for call in self._queue)
                    await self._send(batch)
        finally:
            self._running = False
            _fail(self._queue, _closed())
            self._queue.clear()

    async def _send(self, calls: list[_Call]) -> None:
        batch: list[_Call] = []
        for call in calls:
            if call.build is not None:
                try:
                    call_keys, call_args = call.build()
                except Exception:  # a bug there fails its call, not the batch
                    log.exception("a batched call could not be made")
                    call.error = ServerUnavailable("the task store failed; try again")
                    call.finish()
                    continue
                call.keys, call.args = call_keys, _texts(call_args)
            call.sent = True
            batch.append(call)
        if not batch:
            return
        packed = _pack([(call.which, call.keys, call.args) for call in batch])
        argv = [packed]
        keys: list[str] = []
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
            call.finish()


def _texts(args: list[Any]) -> list[Any]:
    """A call's arguments as text: the scripts compare them as Redis passes them (strings)."""
    try:
        return [a.decode() if type(a) is bytes else str(a) if type(a) in (int, float)
                else a for a in args]
    except UnicodeDecodeError:
        return [_text(a) for a in args]


def _text(arg: Any) -> str:
    """``arg`` as text; bytes that are not UTF-8 (a message's fingerprint) in hex after a
    NUL and ``x``, which :data:`BATCH` turns back into those bytes (Redis' MessagePack has no
    binary type, and no argument of the store's begins with a NUL)."""
    if type(arg) is bytes:
        try:
            return arg.decode()
        except UnicodeDecodeError:
            return "\x00x" + arg.hex()
    return arg if type(arg) is str else str(arg)


def _source(script: Script[bytes]) -> str:
    source = script.script
    return source if isinstance(source, str) else source.decode()


def _closed() -> ServerUnavailable:
    return ServerUnavailable("the task store's connection closed; try again later")


def _fail(calls: list[_Call], error: ServerUnavailable) -> None:
    for call in calls:
        call.error = error
        call.finish()
