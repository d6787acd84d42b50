"""One gRPC call of :class:`~.grpc.GrpcTransport`: its HTTP/2 stream from the request to the
trailers (:class:`GrpcCall`), and a streaming call's messages as an event source for
:class:`~.streams.EventStream` (:class:`GrpcEvents`).

The transport decides what to call and how errors read (metadata, connection, status mapping);
this module carries one call over one stream of its connection.

Cancellation: leaving a call before it ended resets its stream (RST_STREAM CANCEL, a hang-up to
the agent); the connection stays usable for the transport's other calls. Errors: a lost
connection is AgentUnreachable; a stream the agent refused is sent again on a new connection
(at most ``ATTEMPTS`` times); a status other than OK is the transport's mapped error.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

import anyio
from google.protobuf.message import DecodeError, Message

from ..protocol.errors import A2AError, InvalidAgentResponse
from ..protocol.grpc import status as codes
from ..protocol.grpc.framing import MessageReader, percent_decode
from ..protocol.grpc.messages import RpcMethod, answer_json
from .errors import AgentTimeout, AgentUnreachable
from .h2conn import ConnectionLost, H2Client, Stream, StreamRefused
from .streams import RawEvent


class GrpcTransport(Protocol):
    """What a call needs of the transport that opens it (:class:`~.grpc.GrpcTransport`): its
    connection and how its errors read. A protocol, so this module does not import the
    transport that imports it."""

    timeout: float | None
    max_message_bytes: int

    @property
    def where(self) -> str: ...

    async def _connection(self) -> H2Client: ...

    def lost(self, exc: ConnectionLost, what: str = ...) -> AgentUnreachable: ...

    def status_error(self, code: int, message: str, details: bytes | None) -> Exception: ...

    def http_error(self, status: int) -> Exception: ...

ATTEMPTS = 3  # opening a call on a connection that went away meanwhile: new connection


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def remaining(limit: float | None) -> float | None:
    """The call's ``grpc-timeout``: ``limit``, or what is left of the enclosing deadline."""
    effective = anyio.current_effective_deadline()
    left = None if effective == math.inf else max(0.0, effective - anyio.current_time())
    found = [t for t in (limit, left) if t is not None]
    return min(found) if found else None


class GrpcCall:
    """One gRPC call on the transport's connection (an async context manager: a class, so no
    ``yield`` sits in a cancel scope). Entering sends the request and waits for the response
    headers; leaving before the call ended resets its stream. ConnectionLost becomes
    AgentUnreachable; a stream the agent never took is sent again on a new connection."""

    def __init__(self, transport: GrpcTransport, method: str, body: bytes,
                 metadata: list[tuple[bytes, bytes]], *, header_timeout: float | None = None,
                 peek: bool = False) -> None:
        self.t = transport
        self.method = method
        self.body = body
        self.metadata = metadata
        self.header_timeout = header_timeout
        self.peek = peek
        self.reader = MessageReader(transport.max_message_bytes)
        self.conn: H2Client | None = None
        self.stream: Stream | None = None
        self.headers: list[tuple[bytes, bytes]] = []

    async def __aenter__(self) -> GrpcCall:
        for _ in range(ATTEMPTS):
            conn = await self.t._connection()
            try:
                stream = await conn.open(self.metadata, self.body)
            except StreamRefused:
                continue
            except ConnectionLost as exc:
                raise self.t.lost(exc) from None
            self.conn, self.stream = conn, stream
            try:
                if await self._response():
                    return self
            except BaseException:
                await conn.release(stream)
                raise
            await conn.release(stream)  # refused: try again
        raise AgentUnreachable(f"the agent at {self.t.where} refused the call {ATTEMPTS} "
                               "times (its connections were closing)")

    async def _response(self) -> bool:
        """Wait for the response headers (and, to raise an up-front error here, the first
        message while the headers' deadline lasts). False: the stream was refused."""
        assert self.stream is not None
        deadline = math.inf if self.header_timeout is None else \
            anyio.current_time() + self.header_timeout
        try:
            with anyio.CancelScope(deadline=deadline) as waiting:
                headers = await self.stream.response()
        except StreamRefused:
            return False
        except ConnectionLost as exc:
            raise self.t.lost(exc) from None
        if waiting.cancelled_caught:
            raise AgentTimeout(f"the agent at {self.t.where} did not answer in time")
        if headers is None:
            raise self._ended_badly()
        self.headers = headers
        status = _header(headers, b":status")
        if status != "200":
            raise self.t.http_error(int(status) if status and status.isdigit() else 0)
        ctype = (_header(headers, b"content-type") or "").lower()
        if not ctype.startswith("application/grpc"):
            raise InvalidAgentResponse(f"the agent at {self.t.where} answered with "
                                       f"content-type {ctype or 'none'}, not gRPC")
        if _header(headers, b"grpc-status") is not None:  # trailers-only: the call is over
            self._check_status(headers)
        elif self.peek:
            with anyio.CancelScope(deadline=deadline):
                await self._first_message()
            if self.stream.done and not self.stream.unread():
                self._finish()
        return True

    async def _first_message(self) -> None:
        stream = self.stream
        assert stream is not None and self.conn is not None
        await self.conn.pump(stream, lambda: bool(stream.unread()) or stream.done)

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.conn is not None and self.stream is not None:
            await self.conn.release(self.stream)

    async def next_messages(self) -> list[bytes] | None:
        """The messages the next DATA completes (maybe none); None once the call ended OK.
        Raises the call's error status, AgentUnreachable on a broken connection."""
        assert self.stream is not None
        try:
            data = await self.stream.read()
        except ConnectionLost as exc:
            raise self.t.lost(exc) from None
        if data is None:
            self._finish()
            return None
        try:
            return self.reader.feed(data)
        except ValueError as exc:
            raise InvalidAgentResponse(f"the agent at {self.t.where} sent {exc}") from None

    async def unary(self) -> bytes:
        """The one response message of a unary call (its status checked)."""
        found: list[bytes] = []
        while (batch := await self.next_messages()) is not None:
            found += batch
        if len(found) != 1:
            raise InvalidAgentResponse(f"the agent answered {self.method} with {len(found)} "
                                       "messages, not one")
        return found[0]

    def _finish(self) -> None:
        """The stream ended: check that it ended whole, with an OK status."""
        assert self.stream is not None
        if self.stream.reset is not None:
            raise self._ended_badly()
        if self.reader.pending:
            raise InvalidAgentResponse(f"the agent at {self.t.where} ended the call inside "
                                       "a message")
        self._check_status(self.stream.trailers or self.headers)

    def _check_status(self, trailers: Sequence[tuple[bytes, bytes]]) -> None:
        code = _header(trailers, b"grpc-status")
        if code is None or not code.strip().isdigit():
            raise InvalidAgentResponse(f"the agent at {self.t.where} ended the call without "
                                       "a grpc-status")
        if int(code) == codes.OK:
            return
        raw = _header(trailers, b"grpc-message")
        message = percent_decode(raw.encode("latin-1")) if raw else ""
        details = _header(trailers, b"grpc-status-details-bin")
        decoded = None
        if details:
            try:
                decoded = base64.b64decode(details + "=" * (-len(details) % 4))
            except ValueError:
                decoded = None
        raise self.t.status_error(int(code), message, decoded)

    def _ended_badly(self) -> Exception:
        assert self.stream is not None
        code = self.stream.reset
        if code is not None:
            return AgentUnreachable(f"the agent at {self.t.where} reset the call (HTTP/2 "
                                    f"error code {code})")
        return InvalidAgentResponse(f"the agent at {self.t.where} ended the call without "
                                    "an answer")


class GrpcEvents:
    """The events of a server-streaming call, for :class:`~.streams.EventStream`: each
    ``StreamResponse`` message as its 1.0 JSON (no positions: gRPC carries none)."""

    def __init__(self, call: GrpcCall, response: type[Message]) -> None:
        self._call = call
        self._response = response
        self._ended = False
        self.where = call.t.where

    async def receive(self) -> list[RawEvent | A2AError] | None:
        """The events of the next DATA (maybe none); None at the end. An A2A error status
        comes as the last item; a transport failure raises (a TransportError)."""
        if self._ended:
            return None
        try:
            batch = await self._call.next_messages()
        except A2AError as exc:
            self._ended = True
            return [exc]
        except BaseException:
            self._ended = True
            raise
        if batch is None:
            self._ended = True
            return None
        out: list[RawEvent | A2AError] = []
        for data in batch:
            try:
                out.append(RawEvent(answer_json(data, self._response), None))
            except DecodeError:
                out.append(InvalidAgentResponse("a stream message is not a valid "
                                                "StreamResponse"))
        return out

    async def aclose(self) -> None:
        self._ended = True  # the context manager that opened the call resets it


class OpenStream:
    """``async with transport.stream(...) as events``: the call opened on entering, reset on
    leaving unless it ended."""

    def __init__(self, transport: GrpcTransport, rpc: RpcMethod, body: bytes,
                 metadata: list[tuple[bytes, bytes]]) -> None:
        self._call = GrpcCall(transport, rpc.name, body, metadata,
                           header_timeout=transport.timeout, peek=True)
        self._rpc = rpc

    async def __aenter__(self) -> GrpcEvents:
        await self._call.__aenter__()
        return GrpcEvents(self._call, self._rpc.response)

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self._call.__aexit__(exc_type, exc, tb)


__all__ = ["ATTEMPTS", "GrpcCall", "GrpcEvents", "OpenStream", "remaining"]
