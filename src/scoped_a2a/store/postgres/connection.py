"""Connections to PostgreSQL: a bounded pool of psycopg 3 connections used from worker threads.

Why threads: psycopg's async API is asyncio-only (psycopg #29), and this store runs on trio too.
Each store operation is one function run in a worker thread, holding one pooled connection
for one transaction (several statements, one hop to the thread: docs/postgres.md has the
measurement behind this choice). The event loop never blocks on the database.

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

Cancellation: an operation handed to its thread runs to its end (commit or rollback) even when
its caller is cancelled, so it has happened completely or not at all; the caller sees the
cancellation afterwards.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from ...protocol.errors import ServerUnavailable

log = logging.getLogger("scoped_a2a.postgres")
T = TypeVar("T")
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
CONNECT_TIMEOUT = 5
"""Seconds libpq may take to connect (an unreachable host fails within it)."""
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
             "keepalives_count": 3}
"""TCP keepalives: a connection to a host that vanished (no reset) is found dead in ~25 s."""


class CommitUnknown(psycopg.OperationalError):
    """The connection was lost while its transaction was committing: it may have committed."""


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


class Pool:
    """At most ``size`` connections to ``url``, each used by one operation at a time."""

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
        self._idle: list[psycopg.Connection[Any]] = []
        self._slots = anyio.CapacityLimiter(size)
        self._threads = anyio.CapacityLimiter(size)
        self._failing: str | None = None  # the failure last logged (logged once until it heals)
        self._writes_failing = False  # ... and it fails writes only (read-only, a full disk)

    async def run(self, fn: Callable[[psycopg.Connection[Any]], T], *, retry: bool = False,
                  transaction: bool = True) -> T:
        """``fn(conn)`` in a worker thread, in one transaction (committed when it returns,
        rolled back when it raises). ServerUnavailable when the database cannot be used;
        ``fn``'s own exceptions pass through."""
        async with self._slots:
            for attempt in (0, 1):
                idle = self._idle.pop() if self._idle else None
                try:
                    result, conn = await anyio.to_thread.run_sync(
                        self._work, fn, idle, transaction, limiter=self._threads)
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
                if self._failing is not None and not (self._writes_failing and retry):
                    log.warning("PostgreSQL at %s answers again", self.where)
                    self._failing = None
                self._idle.append(conn)
                return result
        raise AssertionError("unreachable")

    def _work(self, fn: Callable[[psycopg.Connection[Any]], T],
              conn: psycopg.Connection[Any] | None, transaction: bool
              ) -> tuple[T, psycopg.Connection[Any]]:
        c = conn if conn is not None and not conn.closed else connect(self.url, self.schema)
        done = False
        try:
            if not transaction:
                return fn(c), c
            with c.transaction():
                result = fn(c)
                done = True  # what raises from here on is the COMMIT's
            return result, c
        except psycopg.OperationalError as exc:
            c.close()
            if done:
                raise CommitUnknown(reason(exc)) from exc
            raise
        except BaseException:
            if c.broken or c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                c.close()  # broken, or left mid-transaction: not reusable
            else:
                self._idle.append(c)
            raise

    def _failed(self, exc: psycopg.Error) -> ServerUnavailable:
        text = failure(self.where, exc)
        kind = type(exc).__name__ + text.split(":", 1)[0]
        if kind != self._failing:
            log.warning("%s", text)
            self._failing = kind
            self._writes_failing = isinstance(
                exc, pgerrors.ReadOnlySqlTransaction | pgerrors.DiskFull)
        return ServerUnavailable(text)

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Close the idle connections (those in use are closed as their operations end)."""
        self._drop_idle()
