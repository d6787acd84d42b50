"""Wake-ups across processes: one LISTEN connection per process, read on the event loop.

Every commit that appends to a task sends ``NOTIFY <schema>_appended, '<position> <task id>'``
in its transaction, so PostgreSQL delivers it exactly when the event is visible. A queued run
notifies ``<schema>_queued``, a cancel request ``<schema>_cancel``; hand-over envelopes go on
``<schema>_handover`` (handover.py). This process's listener
wakes its local waiters (:class:`Waiters`) within milliseconds of another replica's commit; no
loop polls in the steady state.

The listening connection is a plain psycopg connection whose socket the event loop waits on
(``anyio.wait_readable``), then reads what arrived with libpq's non-blocking calls
(``consume_input``, ``notifies``): no thread sits in a blocking read, and it runs on trio and
asyncio alike.

Lost connection (the postmaster restarted, the network cut): logged once, retried with
backoff (0.1 s doubling to 2 s). On reconnecting every waiter is woken, since notifications
sent meanwhile are lost: each re-reads and sees what it missed.

Cancellation: :meth:`Listener.run` ends at once and closes its connection.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Container
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import psycopg
from psycopg import sql

from .connection import connect, display, reason

log = logging.getLogger("scoped_a2a.postgres")
KNOWN = 16_384
"""Positions remembered from notifications (tasks most recently appended to), so a waiter that
registers just after a notification still sees it."""


class Waiters:
    """Local waiters by task id, and the latest position each task is known to have reached."""

    def __init__(self) -> None:
        self._events: dict[str, anyio.Event] = {}
        self.known: OrderedDict[str, int] = OrderedDict()
        self.queued = anyio.Event()
        self.listening = False  # the listener is connected: every commit is announced here

    def event(self, task_id: str) -> anyio.Event:
        ev = self._events.get(task_id)
        if ev is None:
            ev = self._events[task_id] = anyio.Event()
        return ev

    def saw(self, task_id: str, position: int) -> None:
        """``task_id`` reached ``position``: wake its waiters."""
        if self.known.get(task_id, -1) < position:
            self.known[task_id] = position
            self.known.move_to_end(task_id)
            if len(self.known) > KNOWN:
                self.known.popitem(last=False)
        self.wake(task_id)

    def wake(self, task_id: str) -> None:
        ev = self._events.pop(task_id, None)
        if ev is not None:
            ev.set()

    def wake_all(self) -> None:
        events, self._events = self._events, {}
        for ev in events.values():
            ev.set()
        self.queued.set()

    def wake_queue(self) -> None:
        self.queued.set()

    def next_queued(self) -> anyio.Event:
        """The event the next queued run sets (a fresh one once the last was set)."""
        if self.queued.is_set():
            self.queued = anyio.Event()
        return self.queued


class Listener:
    """LISTEN on the schema's channels and dispatch to ``waiters`` and ``on_cancel``."""

    def __init__(self, url: str, schema: str, waiters: Waiters,
                 on_cancel: Callable[[str], None],
                 on_handover: Callable[[str], None] | None = None,
                 own: Container[int] = (), on_reconnect: Callable[[], None] | None = None
                 ) -> None:
        self.url = url
        self.own = own
        """Server process ids of this process's pool (connection.Pool.pids): an append
        they announce was learned here at its commit (core.py), so it is not news."""
        self.on_reconnect = on_reconnect
        """Called when listening again after a lost connection: the pool drops its idle
        connections, whose server processes may be gone with it (a restart) and their ids
        given to other replicas' new connections, which ``own`` must not name."""
        self.schema = schema
        self.waiters = waiters
        self.on_cancel = on_cancel
        self.channels: dict[str, Callable[[str], None]] = {
            f"{schema}_appended": self._appended, f"{schema}_queued": self._queued,
            f"{schema}_cancel": self._cancel}
        if on_handover is not None:  # hand-over envelopes (handover.py)
            self.channels[f"{schema}_handover"] = on_handover
        self.connected = False

    def _appended(self, payload: str, pid: int = 0) -> None:
        pos, _, task_id = payload.partition(" ")
        at = int(pos)
        if pid in self.own and at:
            # This process's own commit, heard perhaps before the writer took its answer:
            # taken as news, readers here would go to the database for what this process
            # is about to hold (most streams did). Position 0: a task deleted (retention).
            return
        self.waiters.saw(task_id, at)

    def _queued(self, payload: str) -> None:
        self.waiters.wake_queue()

    def _cancel(self, payload: str) -> None:
        self.on_cancel(payload)

    def _open(self) -> psycopg.Connection[Any]:
        conn = connect(self.url, self.schema)
        try:
            for channel in self.channels:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            conn.pgconn.nonblocking = 1
        except BaseException:
            conn.close()
            raise
        return conn

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """Listen until cancelled; started once the first LISTEN is in place (or has failed
        once: the store's calls then say the database is unreachable)."""
        backoff = 0.1
        started = False
        failing = False
        while True:
            try:
                conn = await anyio.to_thread.run_sync(self._open)
            except psycopg.Error as exc:
                if not failing:
                    log.warning("cannot listen for wake-ups on PostgreSQL at %s (%s); retrying",
                                display(self.url), reason(exc))
                    failing = True
                if not started:
                    task_status.started()
                    started = True
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if failing:
                log.warning("listening for wake-ups on PostgreSQL at %s again",
                            display(self.url))
                failing = False
                if self.on_reconnect is not None:
                    self.on_reconnect()
            backoff = 0.1
            self.connected = self.waiters.listening = True
            self.waiters.wake_all()  # whatever was sent while not listening is lost: re-read
            if not started:
                task_status.started()
                started = True
            try:
                await self._read(conn)
            except psycopg.Error as exc:
                log.warning("lost the wake-up connection to PostgreSQL at %s (%s); "
                            "reconnecting", display(self.url), reason(exc))
                failing = True
            finally:
                self.connected = self.waiters.listening = False
                conn.close()  # a socket close: never blocks

    async def _read(self, conn: psycopg.Connection[Any]) -> None:
        pg = conn.pgconn
        fd = pg.socket
        while True:
            await anyio.wait_readable(fd)
            pg.consume_input()  # OperationalError once the server is gone
            while (n := pg.notifies()) is not None:
                handler = self.channels.get(n.relname.decode())
                if handler is not None:
                    try:
                        if handler == self._appended:
                            self._appended(n.extra.decode(), n.be_pid)
                        else:
                            handler(n.extra.decode())
                    except ValueError:
                        log.warning("ignored a malformed notification on %s", n.relname)
            if pg.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the connection is gone")
