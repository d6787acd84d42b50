"""A task channel's subscription is confirmed by its acknowledgement, whenever the listener
reads it, and never by an acknowledgement an unsubscribe has overtaken.

Under a starved CPU the listener reads Redis' acknowledgement of a ``SUBSCRIBE`` late. These
tests hold the acknowledgements the listener reads (in order, as a starved listener would read
them later) and check what a reader costs and hears: Redis is real, and round trips are counted
with its own ``INFO commandstats``, not timed.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from coredis.patterns.pubsub import BasePubSub

from scoped_a2a.protocol.types import TaskState
from scoped_a2a.store.redis import connection, open_redis_store
from scoped_a2a.store.redis.connection import RedisConnection
from scoped_a2a.store.redis.subscriptions import Subscriptions

from .conftest import RedisServer
from .test_redis_local import commandstats
from .test_redis_store import new_task, status
from .test_redis_store import tick as trajectory_tick

pytestmark = pytest.mark.anyio


class HeldAcks:
    """Holds the (un)subscribe acknowledgements ``conn``'s listener reads until released."""

    def __init__(self, conn: RedisConnection, monkeypatch: pytest.MonkeyPatch) -> None:
        self.held: list[tuple[str, str, Any]] = []
        self._real = conn._acknowledged
        monkeypatch.setattr(conn, "_acknowledged", self._hold)

    def _hold(self, kind: str, task_id: str, pubsub: Any) -> None:
        self.held.append((kind, task_id, pubsub))

    def release(self, n: int | None = None) -> list[str]:
        """Let the listener act on the first ``n`` held (all by default); their kinds."""
        n = len(self.held) if n is None else n
        out, self.held = self.held[:n], self.held[n:]
        for kind, task_id, pubsub in out:
            self._real(kind, task_id, pubsub)
        return [kind for kind, _, _ in out]

    async def arrived(self, kinds: list[str]) -> None:
        with anyio.fail_after(10):
            while [k for k, _, _ in self.held] != kinds:
                await anyio.sleep(0.01)


async def test_a_late_acknowledgement_still_confirms_and_waits_ask_nothing_after_it(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The acknowledgement is read 1.5 s late (coredis' own wait gave up after 1 s): the
    reader waits for it, checks the position once, and from then on every wait is woken by the
    channel alone: one SUBSCRIBE, one position check, for a dozen appends."""
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        a.poll_interval = 60.0  # only the channel can wake the reader in time
        with anyio.fail_after(10):
            await a.conn.listening.wait()
        acks = HeldAcks(a.conn, monkeypatch)
        task = new_task()
        await b.create(task)
        appends = 12
        seen: list[int] = []
        before = await commandstats(redis_server.url)

        async def reader() -> None:
            after = 0
            while after < appends:
                await a.wait(task.id, after)
                page = await a.read(task.id, after)
                seen.extend(e.position for e in page.entries)
                after = page.next

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await acks.arrived(["subscribe"])
            await anyio.sleep(1.5)
            assert a.conn.confirmed_at(task.id) is None  # not before it is read
            assert acks.release() == ["subscribe"]
            assert a.conn.confirmed_at(task.id) is not None
            with anyio.fail_after(10):
                for i in range(appends):
                    await b.append(task.id, trajectory_tick(task, i))
                    while len(seen) <= i:  # each append wakes the reader
                        await anyio.sleep(0.01)
        after = await commandstats(redis_server.url)
        diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        assert seen == list(range(1, appends + 1))
        assert diff.get("subscribe", 0) == 1, diff
        assert diff.get("hget", 0) <= 1, diff  # the one check after the confirmation


async def test_an_unsubscribe_overtaking_an_acknowledgement_is_not_confirmed_and_a_new_reader_is(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader subscribes and leaves before the acknowledgement is read; the idle channel is
    unsubscribed; a new reader subscribes again. The first acknowledgement, read after the
    UNSUBSCRIBE was sent, confirms nothing (the channel is left right after it); the second
    does, and the new reader is woken by another process's append."""
    monkeypatch.setattr(connection, "WATCH_LINGER", 0.2)
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        a.poll_interval = 60.0
        with anyio.fail_after(10):
            await a.conn.listening.wait()
        acks = HeldAcks(a.conn, monkeypatch)
        task = new_task()
        await b.create(task)
        with anyio.move_on_after(0.1):
            await a.conn.watch(task.id)  # a reader that gives up before the acknowledgement
        await acks.arrived(["subscribe"])
        with anyio.fail_after(10):
            while task.id in a.conn._watched:  # idle: its channel is unsubscribed
                await anyio.sleep(0.01)
        woke = anyio.Event()

        async def waiter() -> None:
            await a.wait(task.id, 0)
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await acks.arrived(["subscribe", "unsubscribe", "subscribe"])
            assert acks.release(1) == ["subscribe"]
            assert a.conn.confirmed_at(task.id) is None, "confirmed by an overtaken SUBSCRIBE"
            assert acks.release(1) == ["unsubscribe"]
            assert a.conn.confirmed_at(task.id) is None
            assert acks.release() == ["subscribe"]
            assert a.conn.confirmed_at(task.id) is not None
            await b.append(task.id, status(task, TaskState.WORKING))
            with anyio.fail_after(10):
                await woke.wait()


def test_acknowledgements_count_in_the_order_sent_and_on_their_connection() -> None:
    ticks = iter(range(1, 100))
    subs = Subscriptions(lambda: next(ticks))
    old, new = object(), object()
    assert subs.to_send("t", old)
    assert not subs.to_send("t", old)  # one in flight is enough
    assert subs.subscribed("t", old)
    assert subs.confirmed_at("t", old) == 1
    assert subs.confirmed_at("t", new) is None  # a reconnect: it counts no more
    # Leaving while a SUBSCRIBE is unanswered: its acknowledgement comes first, and is stale.
    assert subs.to_send("t", new)
    subs.leaving("t", new)
    assert subs.to_send("t", new)  # a new reader sends again after the UNSUBSCRIBE
    assert not subs.subscribed("t", new)
    subs.unsubscribed("t", new)
    assert subs.subscribed("t", new)
    assert subs.confirmed_at("t", new) == 2
    # An UNSUBSCRIBE lost with its connection does not block the next connection's SUBSCRIBE.
    subs.leaving("t", old)
    assert subs.subscribed("t", new)
    # Readers waiting for a confirmation are let go when the connection is gone.
    event = subs.confirmation("u")
    subs.clear()
    assert event.is_set()
    assert subs.confirmed_at("t", new) is None


async def test_the_listener_outlasts_a_slow_first_acknowledgement(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The listener's own channels are acknowledged 1.5 s late (a starved process reads them
    late; coredis' default gave them one second): it starts listening without starting over,
    and hears a cancel request."""
    real = BasePubSub._handle_message
    delayed: list[bytes] = []

    async def late(self: Any, response: list[Any]) -> Any:
        if bytes(response[0]) == b"subscribe" and not delayed:
            delayed.append(bytes(response[1]))
            await anyio.sleep(1.5)
        return await real(self, response)

    monkeypatch.setattr(BasePubSub, "_handle_message", late)
    caplog.set_level(logging.WARNING, logger="scoped_a2a.redis")
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        with anyio.fail_after(10):
            await a.conn.listening.wait()
            await b.conn.listening.wait()
        assert delayed, "no acknowledgement was delayed"
        asked = anyio.Event()
        a.conn.cancel_handlers.append(lambda task_id, why: asked.set())
        await b.conn.publish_cancel("some-task")
        with anyio.fail_after(10):
            await asked.wait()
    restarts = [r.getMessage() for r in caplog.records if "listener" in r.getMessage()]
    assert not restarts, restarts
