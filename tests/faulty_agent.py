"""Misbehaving agents for the client tests: a real agent behind a TCP proxy that injects faults.

The proxy forwards each HTTP request to an agent served by hypercorn (one request per connection:
it asks the agent to close after answering), except requests for the chosen JSON-RPC methods,
where it misbehaves the way a real agent or network does:

- ``close``: closes the connection without answering;
- ``500``: answers HTTP 500;
- ``hang``: never answers (until the client gives up);
- ``404``: answers HTTP 404, the way an agent that forgot the task (or lost its route) does.

``vanish()`` makes the whole agent disappear mid-turn: the listening socket closes (new
connections are refused) and every open connection is cut. Faulty requests are timestamped, so a
test can count the reads a follower made after its turn ended.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import SocketStream, TaskGroup

from scoped_a2a import A2AApp, serve
from scoped_a2a.protocol.trajectory import TRAJECTORY_READ_METHOD

FOLLOWER_METHODS = frozenset({TRAJECTORY_READ_METHOD, "SubscribeToTask", "tasks/resubscribe"})
_EOF = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class _Closed(Exception):
    pass


@dataclass
class FaultyProxy:
    upstream_port: int
    fault: str | None = None
    methods: frozenset[str] = FOLLOWER_METHODS
    faulty_requests: list[float] = field(default_factory=list)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def requests_after(self, t: float) -> int:
        """Faulty requests that arrived after time ``t`` (anyio.current_time())."""
        return sum(1 for x in self.faulty_requests if x > t)

    def vanish(self) -> None:
        """Close the listener and cut every connection, now."""
        self.scope.cancel()

    async def handle(self, client: SocketStream) -> None:
        async with client:
            buffer = b""
            try:
                while True:
                    head, body, buffer = await _read_request(client, buffer)
                    if self.fault and _rpc_method(body) in self.methods:
                        self.faulty_requests.append(anyio.current_time())
                        if not await self._misbehave(client):
                            return
                        continue
                    await self._forward(client, head, body)
                    return
            except (_Closed, *_EOF):
                return

    async def _misbehave(self, client: SocketStream) -> bool:
        """Misbehave on one request; False when the connection is to be dropped."""
        if self.fault == "close":
            return False
        if self.fault in ("500", "404"):
            status = {"500": b"500 Internal Server Error", "404": b"404 Not Found"}[self.fault]
            body = b'{"error":"no such task"}' if self.fault == "404" else b"boom"
            await client.send(b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
                              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            return True
        if self.fault == "hang":
            while True:  # until the client hangs up
                await client.receive()
        raise AssertionError(f"unknown fault {self.fault!r}")

    async def _forward(self, client: SocketStream, head: bytes, body: bytes) -> None:
        lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
        request = b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body
        async with await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
            await upstream.send(request)
            async with anyio.create_task_group() as tg:

                async def client_gone() -> None:
                    try:
                        while await client.receive():
                            pass
                    except _EOF:
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(client_gone)
                try:
                    while True:
                        await client.send(await upstream.receive())
                except _EOF:
                    pass
                tg.cancel_scope.cancel()


async def _read_request(stream: SocketStream, buffer: bytes) -> tuple[bytes, bytes, bytes]:
    while b"\r\n\r\n" not in buffer:
        chunk = await stream.receive()
        if not chunk:
            raise _Closed
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        rest += await stream.receive()
    return head, rest[:length], rest[length:]


async def _accept_forever(
    sock: socket.socket, handle: Callable[[SocketStream], Awaitable[None]], tg: TaskGroup,
) -> None:
    """Accept connections on the listening ``sock``, handling each in ``tg``, until cancelled.

    Not anyio's TCP listener: on asyncio it accepts through ``loop.sock_accept``, and when that
    is cancelled (``vanish()``) just as a connection arrives, the event loop's accept callback
    sets the result of the cancelled future: InvalidStateError inside the loop, which fails the
    test (CPython gh-153761; on 3.11 and 3.13). ``wait_readable`` and a non-blocking accept
    have no such race.
    """
    while True:
        await anyio.wait_readable(sock)
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, InterruptedError):
            continue
        try:
            stream = await SocketStream.from_socket(conn)
        except BaseException:
            conn.close()
            raise
        tg.start_soon(handle, stream)


def _rpc_method(body: bytes) -> str | None:
    try:
        value: Any = json.loads(body)
    except ValueError:
        return None
    return value.get("method") if isinstance(value, dict) else None


@asynccontextmanager
async def faulty_agent(
    agent: Any, fault: str | None, *, methods: Iterable[str] = FOLLOWER_METHODS,
    card: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[str, FaultyProxy, A2AApp]]:
    """Serve ``agent`` behind a fault-injecting proxy; yield (proxy URL, proxy, app)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setblocking(False)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    app = A2AApp(agent, public_url=url, card=card, grace=0.5)
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        upstream = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, grace=0.5,
            task_status=task_status))
        proxy = FaultyProxy(upstream, fault, frozenset(methods))

        async def run_proxy() -> None:
            with proxy.scope, listener:  # vanished: the port refuses new connections
                async with anyio.create_task_group() as conns:
                    await _accept_forever(listener, proxy.handle, conns)

        tg.start_soon(run_proxy)
        try:
            yield url, proxy, app
        finally:
            proxy.vanish()
            shutdown.set()


__all__ = ["FOLLOWER_METHODS", "FaultyProxy", "faulty_agent"]
