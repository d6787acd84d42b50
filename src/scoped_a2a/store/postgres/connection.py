"""Connections to PostgreSQL: a bounded pool of psycopg 3 connections driven from the event loop.

Why not threads: psycopg's async API is asyncio-only (psycopg #29), and this store runs on trio
too. Each statement is psycopg's own generator (the cursor's execute: parameter adaptation,
automatic prepared statements after the fifth use, result loading), driven here by AnyIO's
socket waits (:func:`drive`, what ``psycopg.waiting`` does for asyncio), so no thread hop is
paid per operation (docs/postgres.md has the measurement behind this choice). Connecting, rare,
still happens in a worker thread. The event loop never blocks on the database.

Bounds. At most ``size`` connections are open per process (``--postgres-pool``), and at most as
many operations run at once; more wait their turn. So N processes open at most
``N * (size + 1)`` connections (the one more is the listener's, listener.py).

Credentials come from the URL or libpq's environment (``PGHOST``, ``PGUSER``, ``PGPASSWORD``,
``PGPASSFILE``, ``PGSSLMODE``, ``PGSSLROOTCERT``, ...). They are never logged: logs and errors
name the server by :func:`display` (host, port and database only).

Errors. A failure to reach the server (refused, reset, the postmaster restarted, bad credentials)
drops every idle connection (they are as stale as the one that failed) and raises
ServerUnavailable with one line; the next operation connects afresh, so the store recovers by
itself when the database returns. Each distinct failure is logged once, and its recovery once.
An operation marked ``retry`` (a read) is tried once more on a fresh connection first. A
connection lost while its ``COMMIT`` was under way (:class:`CommitUnknown`) says that the
change may have been stored: the caller must not take the error as "nothing happened" (a send
releases no claim of a task that was stored: claims.py), and a client's resend with the same
messageId is the safe retry (docs/exactly-once.md).

Cancellation: an operation runs shielded to its end (commit or rollback) even when its caller
is cancelled, so it has happened completely or not at all; the caller sees the cancellation
afterwards. (A server that vanished without a reset is found dead by TCP keepalives, ~25 s.)
"""

from __future__ import annotations

import logging
import re
import select
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg._encodings import conn_encoding
from psycopg.generators import execute as pq_execute
from psycopg.pq import TransactionStatus
from psycopg.waiting import Ready

from ...protocol.errors import ServerUnavailable
from .prepared import FAILED, Prepared, param
from .slots import Slots

log = logging.getLogger("scoped_a2a.postgres")
Params = Sequence[Any] | Mapping[str, Any] | None
"""A statement's parameters: positional (``%s``) or named (``%(name)s``)."""
T = TypeVar("T")
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
CONNECT_TIMEOUT = 5
"""Seconds libpq may take to connect (an unreachable host fails within it)."""
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
             "keepalives_count": 3}
"""TCP keepalives: a connection to a host that vanished (no reset) is found dead in ~25 s."""


class CommitUnknown(psycopg.OperationalError):
    """The connection was lost while its transaction was committing: it may have committed."""


class OutcomeUnknown(ServerUnavailable):
    """What callers get for :class:`CommitUnknown`: the change may have been stored (a
    store that must settle such a change, unstarted.py, tells it from other outages)."""


def display(url: str) -> str:
    """``host:port/database`` of a store URL, without user or password (what logs show); a
    URL naming several hosts (libpq tries them in turn: a failover) shows them all."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]  # never the user or password
        if "," in netloc:
            host, port = netloc, ""
        else:
            host = parts.hostname or "(PGHOST)"
            port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(the --store URL)"
    db = parts.path.lstrip("/") or "(PGDATABASE)"
    return f"{host}{port}/{db}"


def reason(exc: BaseException) -> str:
    """The first line of a driver error, as a caller may read it (no credentials: libpq never
    echoes a password)."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return first[:300]


def failure(where: str, exc: psycopg.Error) -> str:
    """One line for a database error, saying what to fix."""
    text = reason(exc)
    if isinstance(exc, pgerrors.ReadOnlySqlTransaction):
        return (f"the PostgreSQL server {where} is read-only (a standby, or a failover "
                f"underway): {text}")
    # A full disk under the tables is an error (DiskFull); under the WAL, the server stops
    # (PANIC) and restarts. The driver's text names a file of the server: not said.
    if isinstance(exc, pgerrors.DiskFull) or "No space left on device" in text:
        full = (f"the PostgreSQL server {where} has a full disk (no space left for the "
                "database's files); try again once space is freed")
        if isinstance(exc, CommitUnknown):
            full += ("; the request under way may or may not have taken effect (resend it "
                     "with the same messageId)")
        return full
    if "password authentication failed" in text or isinstance(
            exc, pgerrors.InvalidAuthorizationSpecification | pgerrors.InvalidPassword):
        return (f"PostgreSQL at {where} refused the credentials ({text}); check the user and "
                "password in --store or PGUSER/PGPASSWORD")
    if isinstance(exc, CommitUnknown):
        return (f"the connection to PostgreSQL at {where} was lost while committing, so this "
                f"request may or may not have taken effect (resend it with the same "
                f"messageId): {text}")
    if isinstance(exc, psycopg.OperationalError):
        return f"PostgreSQL at {where} cannot be reached: {text}"
    return f"the PostgreSQL store at {where} failed: {text}"


def connect(url: str, schema: str) -> psycopg.Connection[Any]:
    """A new connection with ``search_path`` on ``schema`` (blocking: call it in a thread)."""
    conn = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=True,
                           application_name="scoped-a2a", **KEEPALIVE)  # type: ignore[arg-type]
    try:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    except BaseException:
        conn.close()
        raise
    return conn


READY_R, READY_W = int(Ready.R), int(Ready.W)
_POLL = select.poll


def _ready_now(fd: int, wait: int) -> int:
    """What of ``wait`` the socket allows without waiting (a zero-timeout poll: cheaper than a
    round of the event loop, and a socket asked for writing nearly always is writable)."""
    poller = _POLL()
    poller.register(fd, (select.POLLIN if wait & READY_R else 0)
                    | (select.POLLOUT if wait & READY_W else 0))
    events = poller.poll(0)
    if not events:
        return 0
    got = events[0][1]
    return ((READY_R if got & (select.POLLIN | select.POLLERR | select.POLLHUP) else 0)
            | (READY_W if got & select.POLLOUT else 0)) & wait


async def drive(gen: Generator[Any, Any, T], fd: int) -> T:
    """Run one of psycopg's generators (which yield what they wait for: read, write or both)
    to its end, waiting on ``fd`` with AnyIO. Cancellation: the caller shields it (a
    generator abandoned midway leaves the connection unusable)."""
    try:
        wait = next(gen)
        while True:
            ready = _ready_now(fd, wait)
            if not ready:
                if wait & READY_W:
                    # Write (or both): the server reads what we send before it answers, so
                    # waiting for writability alone cannot deadlock; both is rechecked soon.
                    with anyio.move_on_after(0.05 if wait & READY_R else None):
                        await anyio.wait_writable(fd)
                    ready = _ready_now(fd, wait) or (wait & READY_R)
                else:
                    await anyio.wait_readable(fd)
                    ready = READY_R
            wait = gen.send(ready)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class Conn:
    """One connection used from the event loop: :meth:`execute` runs one statement.
    ``pids``: where its server process id is kept while it is open (:attr:`Pool.pids`)."""

    def __init__(self, raw: psycopg.Connection[Any], pids: set[int] | None = None) -> None:
        raw.pgconn.nonblocking = 1
        self.raw = raw
        self.fd = raw.pgconn.socket
        self.pid = raw.pgconn.backend_pid
        self._pids = pids
        self._prepared: set[bytes] = set()  # the Prepared statements this connection has
        self._encoding = conn_encoding(raw)
        if pids is not None:
            pids.add(self.pid)

    async def execute(self, query: Any, params: Params = None
                      ) -> psycopg.Cursor[Any]:
        """Run ``query``; the cursor holds its rows (``fetchone``/``fetchall``, no I/O)."""
        cur = self.raw.cursor()
        await drive(cur._execute_gen(query, params), self.fd)
        return cur

    async def prepared(self, stmt: Prepared, params: Sequence[Any]
                       ) -> list[tuple[bytes | None, ...]]:
        """Run ``stmt`` with ``params`` (str, int, bool, bytes or None); its rows, each value
        in PostgreSQL's text form (None for NULL). Errors are psycopg's, as from
        :meth:`execute` (a lost connection: OperationalError)."""
        pg = self.raw.pgconn
        if stmt.name not in self._prepared:
            pg.send_prepare(stmt.name, stmt.sql, param_types=stmt.oids)
            self._check(await drive(pq_execute(pg), self.fd))
            self._prepared.add(stmt.name)
        pg.send_query_prepared(stmt.name, [param(v) for v in params],
                               param_formats=stmt.formats)
        try:
            res = self._check(await drive(pq_execute(pg), self.fd))
        except pgerrors.InvalidSqlStatementName:
            # Dropped on the server by something other than this class (a DEALLOCATE ALL
            # or DISCARD ALL sent through psycopg: see command()). Prepared again by the next
            # use; again at once outside a transaction (inside, the error ended it).
            self._prepared.discard(stmt.name)
            if pg.transaction_status != TransactionStatus.IDLE:
                raise
            return await self.prepared(stmt, params)
        cols = range(res.nfields)
        return [tuple(res.get_value(r, c) for c in cols) for r in range(res.ntuples)]

    async def command(self, query: bytes) -> None:
        """Run ``BEGIN``, ``COMMIT`` or ``ROLLBACK`` on libpq directly, not through psycopg's
        cursor: psycopg drops the statements it prepared by itself with ``DEALLOCATE ALL``
        when it sees a ``ROLLBACK`` (also what a failed transaction's ``COMMIT`` answers),
        and this connection's :class:`Prepared` ones went with them. Errors as
        :meth:`execute`'s."""
        pg = self.raw.pgconn
        pg.send_query(query)
        self._check(await drive(pq_execute(pg), self.fd))

    def _check(self, results: list[Any]) -> Any:
        """The last of ``results``, or the error the first failed one says."""
        if not results:
            raise psycopg.InternalError("got no result from the query")
        for res in results:
            if res.status in FAILED:
                raise pgerrors.error_from_result(res, encoding=self._encoding)
        return results[-1]

    async def one(self, query: Any, params: Params = None) -> Any:
        """The first row of ``query`` (None if none)."""
        return (await self.execute(query, params)).fetchone()

    async def all(self, query: Any, params: Params = None) -> list[Any]:
        """Every row of ``query``."""
        return (await self.execute(query, params)).fetchall()

    @property
    def closed(self) -> bool:
        return self.raw.closed

    @property
    def idle(self) -> bool:
        return not self.raw.broken and (
            self.raw.pgconn.transaction_status == TransactionStatus.IDLE)

    def close(self) -> None:
        if self._pids is not None:
            self._pids.discard(self.pid)
        self.raw.close()  # a socket close: never blocks


Work = Callable[[Conn], Awaitable[T]]


class Pool:
    """At most ``size`` connections to ``url`` (and one more for the liveness lease's own
    writes), each used by one operation at a time."""

    def __init__(self, url: str, schema: str, size: int = 12) -> None:
        if size < 1:
            raise ValueError("the pool needs at least one connection")
        if not SCHEMA_NAME.match(schema):
            raise ValueError("the schema name must be lower-case letters, digits and _ "
                             "(at most 40), starting with a letter or _")
        self.url = url
        self.schema = schema
        self.where = display(url)
        self.size = size
        self._idle: list[Conn] = []
        self._slots = Slots(size)
        # The lease's renewal and check (``background``) never queue behind requests for a
        # connection: under load all ``size`` may be busy for longer than a lease, and a live
        # process would be recorded lost (store/liveness.py).
        self._background_slots = Slots(1)
        self.pids: set[int] = set()
        """The server process ids of this pool's open connections: a notification one of
        them sent is this process's own (listener.py)."""
        self.on_broken: Callable[[], None] | None = None
        """Called when a connection breaks during an operation: a commit of this process
        may have been announced (its notification ignored as this process's own) without
        this process learning of it (store.py forgets what it holds)."""
        self._failing: str | None = None  # the failure last logged (logged once until it heals)
        self._writes_failing = False  # ... and it fails writes only (read-only, a full disk)

    async def run(self, fn: Work[T], *, retry: bool = False, transaction: bool | None = None,
                  background: bool = False) -> T:
        """``await fn(conn)`` on one connection, in one transaction (committed when it returns,
        rolled back when it raises; ``transaction=False``: each statement commits by itself).
        ``retry``: a read, tried again once on a fresh connection, and with no transaction
        unless asked (under READ COMMITTED a transaction gives its statements no common
        snapshot either; ``BEGIN`` and ``COMMIT`` would be two more round trips).
        ``background``: a small write no caller waits on (the lease's heartbeat and check),
        which does not end a logged failure of writes (on a full disk a small upsert may fit
        in a page where an event does not: the failure was logged again after each), and
        which takes a connection of its own (one at a time) rather than queue behind requests.
        ServerUnavailable when the database cannot be used; ``fn``'s own exceptions pass
        through."""
        if transaction is None:
            transaction = not retry
        # A free slot is taken without a turn of the event loop (slots.py).
        async with self._background_slots if background else self._slots:
            for attempt in (0, 1):
                try:
                    with anyio.CancelScope(shield=True):
                        result = await self._work(fn, transaction, retry)
                except psycopg.OperationalError as exc:
                    self._drop_idle()
                    if retry and attempt == 0:
                        continue
                    raise self._failed(exc) from None
                except psycopg.Error as exc:
                    if isinstance(exc, pgerrors.ReadOnlySqlTransaction | pgerrors.DiskFull):
                        raise self._failed(exc) from None
                    raise
                # A read (``retry``) that works says nothing of a server failing writes only:
                # reads and writes interleaved must not log the failure again at every write.
                if self._failing is not None and not (
                        self._writes_failing and (retry or background)):
                    log.warning("PostgreSQL at %s answers again", self.where)
                    self._failing = None
                return result
        raise AssertionError("unreachable")

    async def query(self, query: Any, params: Params = None, *,
                    retry: bool = False) -> list[Any]:
        """The rows of one statement, committed by itself (one round trip)."""
        async def one(conn: Conn) -> list[Any]:
            return (await conn.execute(query, params)).fetchall()

        return await self.run(one, retry=retry, transaction=False)

    async def _conn(self) -> Conn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        raw = await anyio.to_thread.run_sync(connect, self.url, self.schema)
        return Conn(raw, self.pids)

    async def _work(self, fn: Work[T], transaction: bool, retry: bool) -> T:
        c = await self._conn()
        # Whether a lost connection leaves the outcome unknown: from the COMMIT on; or in a
        # write that commits by itself (a read, ``retry``, changes nothing), when the server
        # did not say why it ended the connection (an error with a SQLSTATE, such as
        # 57P01 "terminating connection", means the statement was not committed).
        unknown = not transaction and not retry
        committing = False
        try:
            if transaction:
                await c.command(b"BEGIN")
            result = await fn(c)
            if transaction:
                committing = True  # what raises from here on is the COMMIT's
                await c.command(b"COMMIT")
        except psycopg.OperationalError as exc:
            c.close()
            if self.on_broken is not None:
                self.on_broken()
            if committing or (unknown and exc.sqlstate is None):
                raise CommitUnknown(reason(exc)) from exc
            raise
        except BaseException:
            await self._rollback(c)
            raise
        self._idle.append(c)
        return result

    async def _rollback(self, c: Conn) -> None:
        """Keep ``c`` if it can be brought back to idle, else close it."""
        if not c.closed and not c.raw.broken and (
                c.raw.pgconn.transaction_status != TransactionStatus.IDLE):
            try:
                await c.command(b"ROLLBACK")
            except psycopg.Error:
                c.close()
                return
        if c.idle:
            self._idle.append(c)
        else:
            c.close()

    def _failed(self, exc: psycopg.Error) -> ServerUnavailable:
        text = failure(self.where, exc)
        kind = type(exc).__name__ + text.split(":", 1)[0]
        if kind != self._failing:
            log.warning("%s", text)
            self._failing = kind
            self._writes_failing = isinstance(
                exc, pgerrors.ReadOnlySqlTransaction | pgerrors.DiskFull)
        return OutcomeUnknown(text) if isinstance(exc, CommitUnknown) else ServerUnavailable(text)

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Close the idle connections (those in use are closed as their operations end)."""
        self._drop_idle()
