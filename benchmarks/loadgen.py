"""The load generator: lean HTTP/1.1 keep-alive connections over asyncio transports.

A full HTTP client library in Python spends more time per request than the servers under test, so
it would measure itself. This one does the least a client can: requests are pre-built bytes (only
a fixed-width counter is spliced in), a response is parsed just enough to find its end
(Content-Length, chunked, or close-delimited), and the throughput loop is callback-driven (the
next request is written from ``data_received``, with no coroutine switch per request).
``python -m benchmarks`` shows its headroom: it drives a bare ASGI app on the same servers far
above any A2A server, while its own process stays below one core.

Only loopback addresses are ever dialled (:func:`connect` refuses anything else).

Cancellation: every coroutine here can be cancelled at any await; :meth:`Conn.close` (or the
``async with`` exit) closes the transport, so no socket outlives its owner.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

HEAD, BODY, CHUNK_SIZE, CHUNK_DATA, CHUNK_TRAILER, UNTIL_CLOSE = range(6)


class ConnectionClosed(ConnectionError):
    """The server closed the connection before the response was complete.

    A ConnectionError, so the callers that retry a dropped connection (the soak's counts through
    the fault-injecting proxy, the readiness poll) retry this too."""


def rpc_body(method: str, params: Any, *, rpc_id: int | str = 1) -> bytes:
    """A compact JSON-RPC 2.0 request body."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params},
        separators=(",", ":"),
    ).encode()


def message_params(text: str, *, message_id: str | None = None,
                   metadata: dict[str, Any] | None = None, return_immediately: bool = False,
                   context_id: str | None = None) -> dict[str, Any]:
    """``SendMessage`` params (A2A 1.0) for a one-part text message.

    Message ids are unique unless given: a server that deduplicates sends by message id
    (scoped-a2a does, per caller) answers a repeated id with the first send's task.
    """
    if message_id is None:
        message_id = f"m-{secrets.token_hex(8)}"
    msg: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    if context_id:
        msg["contextId"] = context_id
    if metadata:
        msg["metadata"] = metadata
    params: dict[str, Any] = {"message": msg}
    if return_immediately:
        params["configuration"] = {"returnImmediately": True}
    return params


def http_request(port: int, body: bytes | None, *, method: str = "POST", path: str = "/",
                 stream: bool = False, headers: Sequence[str] = ()) -> bytes:
    """The bytes of one HTTP/1.1 request to 127.0.0.1:port (A2A 1.0 headers when POSTing);
    ``headers``: extra ``Name: value`` lines (a credential)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers]
    if body is not None:
        lines += ["Content-Type: application/json", "A2A-Version: 1.0",
                  f"Content-Length: {len(body)}"]
        lines.append("Accept: text/event-stream" if stream else "Accept: application/json")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


class RequestTemplate:
    """Pre-built request bytes with a fixed-width counter spliced in (unique message ids).

    ``make(i)`` costs one small format and two concatenations; Content-Length never changes.
    """

    WIDTH = 10

    def __init__(self, port: int, method: str, text: str, *, stream: bool = False,
                 metadata: dict[str, Any] | None = None, return_immediately: bool = False,
                 context_id: str | None = None, rest: bool = False,
                 headers: Sequence[str] = ()):
        """``rest``: the HTTP+JSON binding (the params alone POSTed to ``/message:send`` or
        ``/message:stream``) instead of a JSON-RPC call to ``/``."""
        marker = "#" * self.WIDTH
        # A token per template: two templates (a scenario's phases, say) never share an id.
        params = message_params(text, message_id=f"m-{secrets.token_hex(6)}-{marker}",
                                metadata=metadata,
                                return_immediately=return_immediately, context_id=context_id)
        if rest:
            body = json.dumps(params, separators=(",", ":")).encode()
            path = "/message:stream" if stream else "/message:send"
        else:
            body, path = rpc_body(method, params), "/"
        raw = http_request(port, body, stream=stream, path=path, headers=headers)
        self._head, _, self._tail = raw.partition(marker.encode())

    def make(self, i: int) -> bytes:
        return self._head + b"%010d" % (i % 10**self.WIDTH) + self._tail


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: one request in flight at a time.

    ``send(raw, on_done)`` writes a request; ``on_done(status, body)`` is called from
    ``data_received`` when its response is complete. With ``on_event`` set, the response body
    is also parsed as server-sent events and ``on_event(data, t_received)`` gets each ``data:``
    payload as it arrives (``t_received`` is ``time.monotonic()`` at the read that completed it).
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.will_close = False
        """The last response said ``Connection: close`` (hypercorn does after 1000 requests)."""
        self._buf = bytearray()
        self._phase = HEAD
        self._remaining = 0
        self._status = 0
        self._parts: list[bytes] = []
        self._on_done: Callable[[int, bytes], None] | None = None
        self.on_event: Callable[[bytes, float], None] | None = None
        self.on_headers: Callable[[int, float], None] | None = None
        self._sse = bytearray()
        self._lost = asyncio.get_running_loop().create_future()

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._phase == UNTIL_CLOSE and self._on_done is not None:
            self._finish(b"".join(self._parts))
        elif self._on_done is not None:
            done, self._on_done = self._on_done, None
            done(-1, b"")  # -1: the connection dropped mid-response
        if not self._lost.done():
            self._lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        while buf:
            phase = self._phase
            if phase == HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buf[:end]).lower()
                del buf[: end + 4]
                self._status = int(head[9:12])
                if b"\r\nconnection: close" in head:
                    self.will_close = True
                if self.on_headers is not None:
                    self.on_headers(self._status, time.monotonic())
                cl = head.find(b"\r\ncontent-length:")
                if cl >= 0:
                    stop = head.find(b"\r\n", cl + 2)
                    self._remaining = int(head[cl + 17 : stop if stop >= 0 else None])
                    self._phase = BODY
                    if self._remaining == 0:
                        self._finish(b"")
                elif b"\r\ntransfer-encoding: chunked" in head:
                    self._phase = CHUNK_SIZE
                else:
                    self._phase = UNTIL_CLOSE
            elif phase == BODY:
                if len(buf) < self._remaining:
                    return
                body = bytes(buf[: self._remaining])
                del buf[: self._remaining]
                if self.on_event is not None:
                    self._feed(body)
                self._finish(body)
            elif phase == CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b";")[0], 16)
                del buf[: end + 2]
                if size == 0:
                    self._phase = CHUNK_TRAILER
                else:
                    self._remaining = size
                    self._phase = CHUNK_DATA
            elif phase == CHUNK_DATA:
                if len(buf) < self._remaining + 2:
                    return
                chunk = bytes(buf[: self._remaining])
                del buf[: self._remaining + 2]
                self._phase = CHUNK_SIZE
                if self.on_event is not None:
                    self._feed(chunk)
                else:
                    self._parts.append(chunk)
            elif phase == CHUNK_TRAILER:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                del buf[: end + 2]
                if end == 0:
                    self._finish(b"".join(self._parts))
            else:  # UNTIL_CLOSE
                chunk = bytes(buf)
                buf.clear()
                if self.on_event is not None:
                    self._feed(chunk)
                else:
                    self._parts.append(chunk)

    # --- internals ------------------------------------------------------------------------

    def _finish(self, body: bytes) -> None:
        self._phase = HEAD
        self._parts = []
        done, self._on_done = self._on_done, None
        if done is not None:
            done(self._status, body)

    def _feed(self, chunk: bytes) -> None:
        """Split server-sent events out of the body; call ``on_event`` per ``data:`` payload."""
        sse = self._sse
        sse += chunk.replace(b"\r\n", b"\n")
        now = time.monotonic()
        on_event = self.on_event
        while True:
            end = sse.find(b"\n\n")
            if end < 0:
                return
            block = bytes(sse[:end])
            del sse[: end + 2]
            for line in block.split(b"\n"):
                if line.startswith(b"data:") and on_event is not None:
                    on_event(line[5:].lstrip(), now)

    # --- API ------------------------------------------------------------------------------

    def send(self, raw: bytes, on_done: Callable[[int, bytes], None]) -> None:
        """Write one request; ``on_done(status, body)`` is called when its response ends."""
        if self.closed or self.transport is None:
            on_done(-1, b"")
            return
        self._on_done = on_done
        self._sse.clear()
        self.transport.write(raw)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        """Write one request and wait for its whole response: ``(status, body)``.

        Raises ConnectionClosed when the server drops the connection first.
        """
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()

        def done(status: int, body: bytes) -> None:
            if not fut.done():
                fut.set_result((status, body))

        self.send(raw, done)
        status, body = await fut
        if status < 0:
            raise ConnectionClosed("the server closed the connection mid-response")
        return status, body

    def close(self) -> None:
        """Hang up now (FIN); a response in flight is abandoned."""
        if self.transport is not None and not self.closed:
            self.transport.close()

    async def wait_closed(self) -> None:
        await self._lost

    async def __aenter__(self) -> Conn:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


async def connect(port: int, host: str = "127.0.0.1", *, timeout: float = 10.0) -> Conn:
    """Open one connection to a loopback server."""
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the load generator only dials loopback addresses, not {host}")
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        _, proto = await loop.create_connection(Conn, host, port)
    return proto


async def connect_many(port: int, n: int, *, batch: int = 64) -> list[Conn]:
    """Open ``n`` connections, ``batch`` at a time (a burst of SYNs overflows small backlogs)."""
    conns: list[Conn] = []
    try:
        while len(conns) < n:
            k = min(batch, n - len(conns))
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(connect(port)) for _ in range(k)]
            conns += [t.result() for t in tasks]
    except BaseException:
        for c in conns:
            c.close()
        raise
    return conns


class Loop:
    """Closed-loop load on one connection: each response triggers the next request.

    Runs until ``stop_at`` (``time.perf_counter()``); records the latency of every response that
    completes inside ``[record_from, stop_at]``. ``check(status, body)`` says whether a response
    is right; wrong ones are counted in ``errors`` (and still timed).
    """

    def __init__(self, conn: Conn, template: RequestTemplate, check: Callable[[int, bytes], bool],
                 *, seq_base: int, port: int) -> None:
        self.conn = conn
        self.port = port
        self.reconnects = 0
        self._reconnecting: asyncio.Task[None] | None = None
        self.template = template
        self.check = check
        self.seq = seq_base
        self.latencies: list[float] = []
        self.errors = 0
        self.record_from = 0.0
        self.stop_at = 0.0
        self.done: asyncio.Future[None] | None = None
        self._t0 = 0.0

    def start(self, record_from: float, stop_at: float) -> asyncio.Future[None]:
        self.record_from, self.stop_at = record_from, stop_at
        self.done = asyncio.get_running_loop().create_future()
        self._next()
        return self.done

    def _next(self) -> None:
        self.seq += 1
        self._t0 = time.perf_counter()
        self.conn.send(self.template.make(self.seq), self._on_done)

    def _on_done(self, status: int, body: bytes) -> None:
        now = time.perf_counter()
        ok = status >= 0 and self.check(status, body)
        if now >= self.record_from and now <= self.stop_at:
            self.latencies.append(now - self._t0)
            if not ok:
                self.errors += 1
        assert self.done is not None
        if status < 0:
            if not self.done.done():
                self.done.set_exception(ConnectionClosed("the server dropped a connection"))
            return
        if now >= self.stop_at:
            if not self.done.done():
                self.done.set_result(None)
        elif self.conn.will_close:
            # The server ends keep-alive connections after so many requests; so would a real
            # client, it opens a new one (the time that takes counts in the next latency).
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())
        else:
            self._next()

    async def _reconnect(self) -> None:
        assert self.done is not None
        self.conn.close()
        self.reconnects += 1
        t0 = time.perf_counter()
        try:
            self.conn = await connect(self.port)
        except Exception as exc:
            if not self.done.done():
                self.done.set_exception(exc)
            return
        self._next()
        self._t0 = t0
