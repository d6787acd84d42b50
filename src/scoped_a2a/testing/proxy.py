"""A TCP proxy in front of an A2A agent that misbehaves on chosen JSON-RPC methods.

The proxy reads each HTTP/1.1 request from its client and forwards it to the agent on a fresh
connection (asking the agent to close after answering), except requests whose JSON-RPC method is
in ``methods``: those get the chosen fault. See :class:`FaultyProxy` for the faults.

Cancellation: :meth:`FaultyProxy.vanish` (or cancelling the task that runs
:meth:`FaultyProxy.serve_socket`) closes the listening socket and cuts every connection at once;
nothing is left open. Errors on one connection end that connection only.
"""

from __future__ import annotations

import json
import random
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

import anyio
from anyio.abc import SocketStream, TaskGroup, TaskStatus

from ..protocol.trajectory import TRAJECTORY_READ_METHOD

FOLLOWER_METHODS = frozenset({TRAJECTORY_READ_METHOD, "SubscribeToTask", "tasks/resubscribe"})
"""The reads a trajectory follower makes: the cursor read and the SSE (re)subscription."""

FAULTS = ("close", "500", "404", "hang", "gone", "random")
"""Every fault :class:`FaultyProxy` knows (None: forward everything)."""

MAX_HEAD_BYTES = 1 << 20
"""A request head larger than this ends the connection (a proxy for tests, not a server)."""

_EOF = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)

TaskEnded = Callable[[str], Awaitable[bool]]
"""``await task_ended(task_id)``: True when the task is terminal or unknown (the "gone" fault)."""

OnFault = Callable[[str | None, str | None], None]
"""``on_fault(method, task_id)``: called for every request that gets a fault."""


class _Closed(Exception):
    """The client closed the connection, or sent a request this proxy will not read."""


class FaultyProxy:
    """Forwards HTTP requests to an agent and misbehaves on the chosen JSON-RPC methods.

    Faults (on requests whose method is in ``methods``; every other request is forwarded):

    - ``"close"``: the connection is closed without an answer;
    - ``"500"``: HTTP 500 (the connection stays open for the next request);
    - ``"404"``: HTTP 404 with a JSON body, the way an agent that forgot the task answers;
    - ``"hang"``: no answer, ever (until the client hangs up);
    - ``"gone"``: forwarded while the task runs; once ``task_ended(task_id)`` says the task
      has ended, the connection is closed (an agent that went away after the turn);
    - ``"random"``: each task's matching requests start being closed at a random moment
      0-0.6 s after the first one; and any JSON-RPC request at all is, with probability
      ``fault_rate``, closed at once, answered 500, or cut halfway through its answer.

    ``faulty_requests`` holds the time (``anyio.current_time()``) of every faulted request, so a
    test can count the reads a follower made after its turn ended (:meth:`requests_after`).
    A proxy serves once: after :meth:`vanish` it refuses connections for good.
    """

    def __init__(
        self,
        upstream_port: int,
        fault: str | None = None,
        *,
        methods: Iterable[str] = FOLLOWER_METHODS,
        upstream_host: str = "127.0.0.1",
        task_ended: TaskEnded | None = None,
        fault_rate: float = 0.05,
        seed: int | None = None,
        on_fault: OnFault | None = None,
    ) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
        if fault == "gone" and task_ended is None:
            raise ValueError("the 'gone' fault needs task_ended (is this task over?)")
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.fault = fault
        self.methods = frozenset(methods)
        self.task_ended = task_ended
        self.fault_rate = fault_rate
        self.on_fault = on_fault
        self.faulty_requests: list[float] = []
        self.scope = anyio.CancelScope()
        self._rng = random.Random(seed)
        self._gone_at: dict[str, float] = {}

    def requests_after(self, t: float) -> int:
        """Faulted requests that arrived after time ``t`` (``anyio.current_time()``)."""
        return sum(1 for x in self.faulty_requests if x > t)

    def vanish(self) -> None:
        """Close the listening socket and cut every open connection, now."""
        self.scope.cancel()

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` (0: a free port, reported to ``task_status``) until
        :meth:`vanish` or cancellation; then every connection is cut and the port closed."""
        sock = listen(host, port)
        task_status.started(sock.getsockname()[1])
        await self.serve_socket(sock)

    async def serve_socket(self, sock: socket.socket) -> None:
        """Accept on the listening, non-blocking ``sock`` (closed on return) until
        :meth:`vanish` or cancellation."""
        with self.scope, sock:
            async with anyio.create_task_group() as connections:
                await _accept_forever(sock, self.handle, connections)

    async def handle(self, client: SocketStream) -> None:
        """Serve one client connection: forward its request, or misbehave on it.

        A forwarded request ends the connection once its answer is through (one request per
        connection); a 500/404 fault keeps it for the next request. Closed on return.
        """
        async with client:
            buffer = b""
            try:
                while True:
                    head, body, buffer = await _read_request(client, buffer)
                    method, task_id = _method_and_task(body)
                    action = await self._action(method, task_id)
                    if action == "forward" or action == "cut":
                        await self._forward(client, head, body, cut=action == "cut")
                        return
                    self.faulty_requests.append(anyio.current_time())
                    if self.on_fault is not None:
                        self.on_fault(method, task_id)
                    if not await self._misbehave(client, action):
                        return
            except (_Closed, *_EOF):
                return

    async def _action(self, method: str | None, task_id: str | None) -> str:
        """What to do with one request: "forward", "cut", or a fault to play."""
        matches = method in self.methods
        if self.fault is None:
            return "forward"
        if self.fault in ("close", "500", "404", "hang"):
            return self.fault if matches else "forward"
        if self.fault == "gone":
            if matches and task_id is not None and self.task_ended is not None:
                try:
                    ended = await self.task_ended(task_id)
                except Exception:  # the agent cannot say: treat it as gone
                    ended = True
                return "close" if ended else "forward"
            return "forward"
        # "random"
        if matches and task_id is not None:
            now = anyio.current_time()
            if now >= self._gone_at.setdefault(task_id, now + self._rng.uniform(0.0, 0.6)):
                return "close"
        if method is not None and self._rng.random() < self.fault_rate:
            choice: str = self._rng.choice(("close", "500-close", "cut"))
            return choice
        return "forward"

    async def _misbehave(self, client: SocketStream, action: str) -> bool:
        """Play one fault; False when the connection is to be dropped."""
        if action == "close":
            return False
        if action in ("500", "500-close"):
            await client.send(_answer(b"500 Internal Server Error", b"boom",
                                      close=action == "500-close"))
            return action == "500"
        if action == "404":
            await client.send(_answer(b"404 Not Found", b'{"error":"no such task"}'))
            return True
        if action == "hang":
            while True:  # until the client hangs up (EndOfStream ends the connection)
                await client.receive()
        raise AssertionError(f"unknown action {action!r}")

    async def _forward(self, client: SocketStream, head: bytes, body: bytes, *, cut: bool) -> None:
        lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
        request = b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body
        async with await anyio.connect_tcp(self.upstream_host, self.upstream_port) as upstream:
            await upstream.send(request)
            async with anyio.create_task_group() as tg:

                async def client_gone() -> None:
                    # The client hanging up must reach the agent as a hang-up: stop relaying
                    # and close the upstream connection.
                    try:
                        while await client.receive():
                            pass
                    except _EOF:
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(client_gone)
                try:
                    while True:
                        chunk = await upstream.receive()
                        if cut:  # half an answer, then the line goes dead
                            await client.send(chunk[: max(1, len(chunk) // 2)])
                            break
                        await client.send(chunk)
                except _EOF:
                    pass
                tg.cancel_scope.cancel()


def listen(host: str = "127.0.0.1", port: int = 0, backlog: int = 1024) -> socket.socket:
    """A listening, non-blocking TCP socket on ``host:port`` (0: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setblocking(False)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


async def _accept_forever(
    sock: socket.socket, handle: Callable[[SocketStream], Coroutine[Any, Any, None]],
    tg: TaskGroup,
) -> None:
    """Accept connections on the listening ``sock``, handling each in ``tg``, until cancelled.

    Not anyio's TCP listener: on asyncio it accepts through ``loop.sock_accept``, and when that
    is cancelled (``vanish()``) just as a connection arrives, the event loop's accept callback
    sets the result of the cancelled future: InvalidStateError inside the loop, which fails the
    caller (CPython gh-153761; on 3.11 and 3.13). ``wait_readable`` and a non-blocking accept
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


async def _read_request(stream: SocketStream, buffer: bytes) -> tuple[bytes, bytes, bytes]:
    """(head, body, what is left of the buffer) of the next request on ``stream``."""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > MAX_HEAD_BYTES:
            raise _Closed
        chunk = await stream.receive()
        if not chunk:
            raise _Closed
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise _Closed from None
    while len(rest) < length:
        rest += await stream.receive()
    return head, rest[:length], rest[length:]


def _answer(status: bytes, body: bytes, *, close: bool = False) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
            + (b"connection: close\r\n" if close else b"")
            + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _method_and_task(body: bytes) -> tuple[str | None, str | None]:
    """The JSON-RPC method of a request body and the task id in its params (each or None)."""
    try:
        value: Any = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    method = value.get("method")
    params = value.get("params")
    task_id = (params.get("taskId") or params.get("id")) if isinstance(params, dict) else None
    return (method if isinstance(method, str) else None,
            task_id if isinstance(task_id, str) else None)
