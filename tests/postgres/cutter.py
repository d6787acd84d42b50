"""A TCP relay between a store and PostgreSQL that cuts a connection at a chosen commit.

It reads the client's side of the PostgreSQL wire protocol (v3) message by message, keeping the
SQL of each transaction (simple queries, and the text behind each statement a Bind runs:
psycopg's unnamed ones, those it prepares once it ran a query five times, and those the store
prepares at their first use, prepared.Prepared). :meth:`Cutter.arm` picks the next transaction
whose SQL holds ``marker`` and where to cut it: ``"during"``, at that statement (the
transaction is open; the server rolls it back); ``"before"``, at its ``COMMIT``, not forwarded
(rolled back, but the client cannot tell: its commit got no answer); ``"after"``, at its
``COMMIT``, forwarded, cutting the connection as the server's answer arrives (committed, and
the client never hears it). A statement sent outside a transaction commits by itself: it is
its own ``COMMIT`` for ``"before"`` and ``"after"``. Every other byte passes through untouched.

Cancellation: cancelling :meth:`Cutter.serve` closes the port and every relayed connection.
"""

from __future__ import annotations

import contextlib

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

_UNTYPED_AGAIN = {80877103, 80877104}  # SSLRequest, GSSENCRequest: the startup goes on after


class _Cut(Exception):
    """This connection is to be cut now."""


class _Connection:
    def __init__(self) -> None:
        self.statements: dict[bytes, bytes] = {}  # prepared statement name -> its SQL
        self.sql: list[bytes] = []  # what the open transaction ran
        self.open = False  # a transaction is open (between BEGIN and COMMIT)
        self.drop_answer = False


class Cutter:
    """Relays connections to PostgreSQL at ``upstream_port`` on loopback."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.marker: bytes | None = None
        self.when = "before"
        self.cuts = 0

    def arm(self, marker: bytes, when: str) -> None:
        """Cut the next transaction whose SQL holds ``marker``; ``when``: ``"during"``,
        ``"before"`` or ``"after"`` its commit (above)."""
        assert when in ("during", "before", "after")
        self.marker, self.when = marker, when

    async def serve(self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
                    ) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started(port)
        async with listener:
            await listener.serve(self._relay)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        conn = _Connection()
        async with client, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as up, \
                anyio.create_task_group() as tg:

            async def down() -> None:
                try:
                    async for chunk in up:
                        if conn.drop_answer:
                            raise _Cut
                        await client.send(chunk)
                except (_Cut, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(down)
            with contextlib.suppress(_Cut, anyio.EndOfStream, anyio.IncompleteRead,
                                     anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._up(BufferedByteReceiveStream(client), up, conn)
            tg.cancel_scope.cancel()

    async def _up(self, client: BufferedByteReceiveStream, up: anyio.abc.SocketStream,
                  conn: _Connection) -> None:
        while True:  # the startup: untyped messages
            head = await client.receive_exactly(4)
            body = await client.receive_exactly(int.from_bytes(head, "big") - 4)
            await up.send(head + body)
            if int.from_bytes(body[:4], "big") not in _UNTYPED_AGAIN:
                break
        while True:
            kind = await client.receive_exactly(1)
            head = await client.receive_exactly(4)
            body = await client.receive_exactly(int.from_bytes(head, "big") - 4)
            if self._see(conn, kind, body):
                self.cuts += 1
                self.marker = None
                if self.when != "after":
                    raise _Cut
                conn.drop_answer = True  # the server commits; its answer is never relayed
            await up.send(kind + head + body)

    def _see(self, conn: _Connection, kind: bytes, body: bytes) -> bool:
        """Note the SQL of one client message; True if it is where to cut."""
        query = b""
        if kind == b"Q":
            text = body.rstrip(b"\0").strip().upper()
            if text == b"BEGIN":
                conn.sql, conn.open = [], True
                return False
            if text == b"COMMIT":
                conn.open = False
                return self.marker is not None and self.when != "during" and any(
                    self.marker in q for q in conn.sql)
            query = body
        elif kind == b"P":  # Parse: name \0 query \0 ... (it runs at a Bind of it)
            name, query = body.split(b"\0", 2)[:2]
            conn.statements[name] = query  # b"": the unnamed statement, till the next one
            return False
        elif kind == b"B":  # Bind: portal \0 statement \0 ...
            query = conn.statements.get(body.split(b"\0", 2)[1], b"")
        if not query:
            return False
        conn.sql.append(query)
        if self.marker is None or self.marker not in query:
            return False
        # In a transaction: "during" cuts here, the others at its COMMIT. A statement that
        # commits by itself (autocommit, no BEGIN) is its own COMMIT: "before" and "after" cut
        # at it (not forwarded; forwarded with its answer dropped).
        return self.when == "during" if conn.open else self.when != "during"
