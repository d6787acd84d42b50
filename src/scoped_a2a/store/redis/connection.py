"""One process's connection to a shared Redis: the client, error translation, and the listener
that wakes local waiters and delivers cancel requests (key names: :mod:`.keys`).

Ownership. :meth:`RedisConnection.open` is an async context manager: it enters coredis' client
(whose connection pool owns its connection tasks) and a task group holding the pub/sub listener;
both end when the ``async with`` body does. Nothing is global.

Local knowledge. The listener also keeps :attr:`RedisConnection.local` (:mod:`.local`) up to
date: the positions announced on each task's channel, and (:mod:`.subscriptions`) which
subscriptions Redis has confirmed on its current connection, so the store can answer reads and
waits without a round trip when that is provably the same answer.

Redis down. Every command goes through :meth:`RedisConnection.call`, which bounds it with a
deadline, retries once after a connection error (every write is idempotent, see
:mod:`.scripts`), and otherwise raises ``ServerUnavailable`` (-32000) with a clear message. The
client reconnects on the next command and the listener resubscribes with capped backoff, so the
process recovers by itself when Redis returns.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeGuard, TypeVar

import anyio
import coredis
from coredis.commands.script import Script
from coredis.exceptions import ConnectionError as RedisConnectionError
from coredis.exceptions import RedisError
from coredis.patterns.pubsub import PubSub
from coredis.retry import (
    CompositeRetryPolicy,
    ConstantRetryPolicy,
    ExponentialBackoffRetryPolicy,
    NoRetryPolicy,
)

from ...protocol.errors import ServerUnavailable
from ...protocol.exc_groups import first_leaf
from ...protocol.ids import new_id
from ...timeouts import fail_after
from ..liveness import cancel_reason
from ..outage_log import OutageLog
from .batch import BATCH, Batcher
from .keys import Keys
from .local import LocalView
from .subscriptions import Subscriptions

log = logging.getLogger("scoped_a2a.redis")
_outages = OutageLog(log)  # one line per few seconds while Redis is away, not one per attempt

T = TypeVar("T")

WATCH_LINGER = 10.0
"""Seconds a task's channel stays subscribed after its last waiter left (streams wait often)."""

LISTEN_ACK_TIMEOUT = 10.0
"""Seconds the listener's own channels (cancel, hand-over) may take to be acknowledged, at its
start and after a reconnect. coredis' default, one second, ran out under a starved CPU: the
listener then started over (its channels unheard meanwhile) although Redis was fine."""


class _Waiters:
    """Local waiters per task id: one ``anyio.Event``, set and replaced on every wake-up."""

    def __init__(self) -> None:
        self._events: dict[str, list[Any]] = {}  # task id -> [Event, number of waiters]

    @contextmanager
    def watching(self, task_id: str) -> Iterator[anyio.Event]:
        """The event the next wake-up of ``task_id`` sets (register before checking)."""
        entry = self._events.setdefault(task_id, [anyio.Event(), 0])
        entry[1] += 1
        try:
            yield entry[0]
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._events.get(task_id) is entry:
                del self._events[task_id]

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._events

    def wake(self, task_id: str) -> None:
        entry = self._events.get(task_id)
        if entry is not None:
            entry[0].set()
            entry[0] = anyio.Event()


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class RedisConnection:
    """The client, keys and listener of one process. Build it with :meth:`open`."""

    def __init__(
        self, client: coredis.Redis[bytes], url: str, keys: Keys, *, op_timeout: float
    ) -> None:
        self.client = client
        self.url = redacted(url)
        self.keys = keys
        self.op_timeout = op_timeout
        self._no_answer = f"no answer within {op_timeout:g} s"  # a timed-out command's reason
        self.waiters = _Waiters()
        self.cancel_handlers: list[Callable[[str, str], None]] = []
        """Called with a task id and the reason when any process asks for that task's run to
        stop (store/liveness.py: cancel_reason)."""
        self.process_id = f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        """This process's id among those sharing the Redis (liveness leases, hand-over)."""
        self.handover_handlers: list[Callable[[bytes], None]] = []
        """Called with each hand-over message for this process (:mod:`.handover`)."""
        self.listening = anyio.Event()
        """Set once the listener is subscribed (tests wait for it; waiters also poll)."""
        self._pubsub: PubSub[bytes] | None = None
        self._watched: dict[str, float] = {}  # task id -> when a waiter last needed it
        self._tick = 0
        self.subscriptions = Subscriptions(self.tick)
        """Task channels Redis confirmed, from the acknowledgements the listener reads."""
        self.local = LocalView(self.confirmed_at)
        """Entries, snapshots and positions this process knows without asking (:mod:`.local`)."""
        self.batcher = Batcher(self.call, client.register_script(BATCH))
        """Sends the script calls that arrive together in one round trip (:mod:`.batch`)."""

    @classmethod
    @asynccontextmanager
    async def open(
        cls, url: str, *, prefix: str = "scoped_a2a", op_timeout: float = 5.0,
        connect_timeout: float = 2.0, max_connections: int = 64,
    ) -> AsyncIterator[RedisConnection]:
        """Connect to ``url`` (``redis://[:password@]host:port/db``) for the ``async with`` body.

        Does not wait for Redis to be up: commands fail with ServerUnavailable until it is.
        On exit the listener is cancelled and the connections are closed.
        """
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"a Redis URL starts with redis://, rediss:// or unix://, not {url!r}")
        client: coredis.Redis[bytes] = coredis.Redis.from_url(
            url, retry_policy=NoRetryPolicy(), connect_timeout=connect_timeout,
            max_connections=max_connections,
        )
        async with client, anyio.create_task_group() as tg:
            conn = cls(client, url, Keys(prefix), op_timeout=op_timeout)
            tg.start_soon(conn._listen, name="scoped_a2a redis listener")
            tg.start_soon(conn.batcher.run, name="scoped_a2a redis batches")
            try:
                yield conn
            finally:
                tg.cancel_scope.cancel()

    # --- commands -------------------------------------------------------------------------

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run one command (or script) with a deadline; translate failures.

        A connection error or timeout is retried once after 50 ms (the pool reconnects; writes
        are idempotent), then raised as ServerUnavailable. Any other Redis error is raised as
        ServerUnavailable at once, with Redis' message.
        """
        for attempt in (1, 2):
            try:
                # The package's fail_after, not anyio's: a command past its deadline must not
                # leave this frame (``fn`` and what it holds) in a reference cycle (timeouts.py)
                with fail_after(self.op_timeout, reason=self._no_answer):
                    return await fn()
            except (RedisConnectionError, TimeoutError) as exc:
                if attempt == 2:
                    raise ServerUnavailable(
                        f"the task store is unreachable (Redis at {self.url}): "
                        f"{exc or type(exc).__name__}; try again later"
                    ) from exc
            except RedisError as exc:
                raise ServerUnavailable(
                    f"the task store (Redis at {self.url}) failed: {exc}"
                ) from exc
            except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                # coredis' connection was closed under the command: the process is stopping
                raise ServerUnavailable(
                    f"the connection to the task store (Redis at {self.url}) closed; "
                    "try again later") from exc
            await anyio.sleep(0.05)
        raise AssertionError("unreachable")

    def script(self, source: str) -> Script[bytes]:
        """Register a Lua script (loaded on first use, and again after a Redis restart)."""
        return self.client.register_script(source)

    async def run(self, script: Script[bytes], keys: list[str], args: list[Any]) -> Any:
        """Run a registered script (in the next batch, :mod:`.batch`, if it is one of the
        store's, else on its own through :meth:`call`); its reply as Redis gave it."""
        if self.batcher.handles(script):
            return await self.batcher.submit(script, keys, args)
        return await self.call(lambda: script(keys, args))

    async def publish_cancel(self, task_id: str) -> None:
        """Ask every process to cancel ``task_id``'s run if it executes there (best effort)."""
        try:
            await self.call(lambda: self.client.publish(self.keys.cancel, task_id))
        except ServerUnavailable as exc:
            _outages.failed("publish", "could not publish the cancellation of task %s: %s",
                            task_id, exc)

    # --- the listener ---------------------------------------------------------------------

    def tick(self) -> int:
        """The next value of this process's event counter (orders commands and confirmations)."""
        self._tick += 1
        return self._tick

    def confirmed_at(self, task_id: str) -> int | None:
        """The tick at which Redis confirmed ``task_id``'s subscription, if it still holds.

        None when the channel is not subscribed, or was confirmed on a listener connection
        that has since been replaced (messages published in between may be lost).
        """
        pubsub = self._pubsub
        if pubsub is None:
            return None
        return self.subscriptions.confirmed_at(task_id, _connection_of(pubsub))

    async def watch(self, task_id: str) -> None:
        """Make sure this process hears ``task_id``'s appends (its channel is subscribed).

        Returns once Redis has confirmed the subscription (the listener records its
        acknowledgement, :mod:`.subscriptions`), so a check made afterwards cannot miss a
        notification; if the listener is reconnecting it returns at once, and after
        ``op_timeout`` without the acknowledgement too (waiters poll; the acknowledgement, when
        it comes, is still recorded and wakes the task's waiters to check again).
        Channels no waiter needed for ``WATCH_LINGER`` seconds are unsubscribed.
        Cancellation: the ``SUBSCRIBE`` may or may not be sent; its acknowledgement is recorded.
        """
        self._watched[task_id] = time.monotonic()
        pubsub = self._pubsub
        if pubsub is None or self.confirmed_at(task_id) is not None:
            return
        confirmed = self.subscriptions.confirmation(task_id)
        connection = _connection_of(pubsub)
        # One SUBSCRIBE in flight per channel: the readers that come meanwhile wait for its
        # acknowledgement. Sent without coredis' subscribe(), whose 1 s wait for the
        # acknowledgement is what ran out under load.
        if self.subscriptions.to_send(task_id, connection):
            try:
                pubsub.connection.send_command(b"SUBSCRIBE", self.keys.appended(task_id))
            except (RedisError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                self.subscriptions.unsent(task_id)
                log.debug("could not subscribe to task %s: %s", task_id, exc)
                return
        with anyio.move_on_after(self.op_timeout) as waited:
            await confirmed.wait()
        if waited.cancelled_caught:
            log.debug("task %s: no acknowledgement of its SUBSCRIBE within %.0f s yet",
                      task_id, self.op_timeout)

    async def _listen(self) -> None:
        """Dispatch ``appended`` and ``cancel`` messages until cancelled; never raises.

        While Redis is unreachable it resubscribes with capped backoff; waiters poll meanwhile,
        and runs cancelled elsewhere stop at their next write.
        """
        retry = CompositeRetryPolicy(
            ExponentialBackoffRetryPolicy(
                (RedisConnectionError,), retries=None, base_delay=0.05, max_delay=1.0, jitter=True
            ),
            ConstantRetryPolicy((TimeoutError,), retries=3, delay=0.1),
        )
        cancel = self.keys.cancel.encode()
        appended = self.keys.appended("").encode()
        handover = {self.keys.handover.encode(),
                    self.keys.handover_to(self.process_id).encode()}
        while True:
            try:
                async with self.client.pubsub(
                    channels=[self.keys.cancel, *(c.decode() for c in handover)],
                    retry_policy=retry, max_idle_seconds=5,
                    subscription_timeout=LISTEN_ACK_TIMEOUT,
                ) as pubsub, anyio.create_task_group() as tg:
                    self._pubsub = pubsub
                    self.listening.set()
                    _outages.recovered("Redis listener")
                    tg.start_soon(self._forget_idle_channels, pubsub)
                    async for message in pubsub:
                        channel, data = message["channel"], message["data"]
                        if isinstance(channel, str):
                            channel = channel.encode()
                        kind = message["type"]
                        if kind != "message":
                            if channel.startswith(appended):
                                self._acknowledged(kind, channel[len(appended):].decode(),
                                                   pubsub)
                        elif channel.startswith(appended):
                            task_id = channel[len(appended):].decode()
                            try:
                                news = self.local.heard(task_id, int(data))
                            except (TypeError, ValueError):
                                # Not a position: the task was evicted (or an older version
                                # published): nothing local may answer for it any more.
                                self.local.forget(task_id)
                                news = True
                            if news:
                                self.waiters.wake(task_id)
                        elif channel == cancel:
                            task_id, why = cancel_reason(
                                data.decode() if isinstance(data, bytes) else str(data))
                            for handler in list(self.cancel_handlers):
                                handler(task_id, why)
                        elif channel in handover:
                            payload = data if isinstance(data, bytes) else str(data).encode()
                            for on_handover in list(self.handover_handlers):
                                on_handover(payload)
                    tg.cancel_scope.cancel()
            except BaseException as exc:
                stopping = first_leaf(exc, _is_cancellation)  # itself, or in its group
                if stopping is not None:
                    if stopping is not exc:
                        # Stopped (at once, a second signal): what coredis' pub/sub raised as
                        # its connection closed under it is no news; the stop is.
                        log.debug("the Redis listener stopped", exc_info=exc)
                        raise stopping from None
                    raise
                if not isinstance(exc, Exception):
                    raise
                # Being stopped (asyncio reports coredis' errors without the cancellation)?
                # Then that is the news, not the closed connection.
                await anyio.lowlevel.checkpoint_if_cancelled()
                # The listener must outlive any Redis trouble.
                log.debug("the Redis listener stopped", exc_info=True)
                _outages.failed("Redis listener", "Redis listener stopped (%s); resubscribing",
                                exc or type(exc).__name__)
            finally:
                self._pubsub = None
                self.subscriptions.clear()
            await anyio.sleep(0.5)

    async def _forget_idle_channels(self, pubsub: PubSub[bytes]) -> None:
        while True:
            await anyio.sleep(WATCH_LINGER / 2)
            cutoff = time.monotonic() - WATCH_LINGER
            idle = [t for t, used in self._watched.items()
                    if used < cutoff and t not in self.waiters]
            if not idle:
                continue
            connection = _connection_of(pubsub)
            for task_id in idle:
                del self._watched[task_id]
                # Unconfirmed before the UNSUBSCRIBE is sent: never trusted while unheard.
                self.subscriptions.leaving(task_id, connection)
                self.local.forget(task_id)
            # Not coredis' unsubscribe(): it waits 0.1 s for the acknowledgement and warns
            # past it; the listener reads the acknowledgement like any message.
            pubsub.connection.send_command(
                b"UNSUBSCRIBE", *(self.keys.appended(t) for t in idle))

    def _acknowledged(self, kind: str, task_id: str, pubsub: PubSub[bytes]) -> None:
        """Redis acknowledged a (UN)SUBSCRIBE of ``task_id``'s channel (in the order sent)."""
        connection = _connection_of(pubsub)
        if kind == "subscribe":
            if self.subscriptions.subscribed(task_id, connection):
                # A reader that stopped waiting for this checks again, now with no gap.
                self.waiters.wake(task_id)
        elif kind == "unsubscribe":
            self.subscriptions.unsubscribed(task_id, connection)


def _is_cancellation(exc: BaseException) -> TypeGuard[BaseException]:
    """A cancellation of the running backend (asyncio's or trio's class)."""
    return isinstance(exc, anyio.get_cancelled_exc_class())


def _connection_of(pubsub: PubSub[bytes]) -> object:
    """The connection the listener currently reads (coredis replaces it on a reconnect)."""
    return getattr(pubsub, "_connection", None)
