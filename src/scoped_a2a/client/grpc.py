"""A2A 1.0's gRPC binding, the client side: :class:`GrpcTransport`.

It has the interface of :class:`~.rpc.RpcTransport` (``call`` returning the raw result JSON,
``stream`` handing out what :class:`~.streams.EventStream` reads), so the client and its codecs
do not care which binding carries a call: the 1.0 JSON params the codec builds become the
method's request message and the response message becomes the JSON result again, by the
ProtoJSON conversion the server uses the other way (:mod:`...protocol.grpc.messages`).

Every call is one stream of one HTTP/2 connection per transport (:mod:`.h2conn`, no task of its
own), opened on first use and again after it broke. Metadata: ``a2a-version: 1.0``,
``a2a-extensions``, the credential (``authorization``, ``x-api-key``: what ``auth`` would put in
HTTP headers), ``last-event-id`` for a resumed subscription, and ``grpc-timeout``: the
transport's ``timeout`` for a bounded call, or what is left of an enclosing AnyIO deadline,
whichever comes first.

Errors map as on the other bindings: a status with an ErrorInfo reason (or a code the A2A table
names) is its :class:`A2AError` subclass; UNAUTHENTICATED / PERMISSION_DENIED are
``Unauthenticated`` / ``PermissionDenied`` naming what the card accepts; DEADLINE_EXCEEDED (or
our own deadline) is :class:`AgentTimeout`; UNAVAILABLE, a reset call and a broken or refused
connection are :class:`AgentUnreachable`. A method gRPC has no rpc for (our trajectory read)
goes to the agent's JSON-RPC interface when its card offers one, else UnsupportedOperation.

Cancellation: a cancelled call resets its stream (RST_STREAM CANCEL, which our server takes as a
hang-up) and the connection stays usable for the other calls.
"""

from __future__ import annotations

import base64
import math
import ssl
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

import anyio
import httpx
import msgspec
from google.protobuf.json_format import ParseError
from google.protobuf.message import DecodeError, Message

from ..observe.propagation import client_span
from ..protocol.errors import (
    A2AError,
    InvalidAgentResponse,
    InvalidParams,
    PermissionDenied,
    Unauthenticated,
    UnsupportedOperation,
)
from ..protocol.grpc import status as codes
from ..protocol.grpc.framing import MessageReader, format_timeout, frame, percent_decode
from ..protocol.grpc.messages import SERVICE, RpcMethod, answer_json, methods, request_bytes
from .errors import AgentHTTPError, AgentTimeout, AgentUnreachable
from .h2conn import ConnectionLost, H2Client, Stream, StreamRefused
from .rpc import RpcTransport
from .streams import RawEvent

MAX_MESSAGE_BYTES = 64 << 20
"""A response message larger than this is refused (gRPC's own default is 4 MiB)."""
_ATTEMPTS = 3  # opening a call on a connection that went away meanwhile: new connection
_RESERVED = {"host", "content-length", "content-type", "te", "connection", "user-agent",
             "transfer-encoding", "keep-alive", "upgrade", "accept", "accept-encoding"}
_USER_AGENT = b"scoped-a2a grpc-client"


def grpc_target(url: str, *, base_url: str) -> tuple[str, int, bool]:
    """``(host, port, tls)`` of a card's gRPC URL: ``host:port`` (TLS when the agent's base
    URL is https) or with a scheme (``https``/``grpcs`` TLS, ``http``/``grpc`` plain).
    Raises InvalidAgentResponse for one that names no host."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        scheme, rest = "", url.strip()
    scheme = scheme.lower()
    tls = scheme in ("https", "grpcs") or (not scheme and base_url.lower().startswith("https:"))
    hostport = rest.split("/", 1)[0]
    if hostport.startswith("["):  # [::1]:50051
        host, _, tail = hostport[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = hostport.partition(":")
    if not host or (port_text and not port_text.isdigit()):
        raise InvalidAgentResponse(f"the agent card's gRPC URL {url!r} is not host:port")
    return host, int(port_text) if port_text else (443 if tls else 80), tls


def auth_metadata(auth: httpx.Auth | None) -> list[tuple[bytes, bytes]]:
    """The headers ``auth`` adds to a request (``authorization``, an API key header), as
    gRPC metadata. An auth that needs a challenge round trip adds only its first headers."""
    if auth is None:
        return []
    request = httpx.Request("POST", "http://grpc.invalid/")
    plain = dict(httpx.Request("POST", "http://grpc.invalid/").headers.items())
    flow = auth.sync_auth_flow(request)
    try:
        sent = next(flow)
    except StopIteration:  # pragma: no cover (an auth that sends nothing)
        return []
    finally:
        flow.close()
    return [(k.lower().encode(), v.encode()) for k, v in sent.headers.items()
            if plain.get(k) != v and k.lower() not in _RESERVED]


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


class GrpcTransport:
    """Calls one agent's gRPC interface (``lf.a2a.v1.A2AService``, 1.0) over HTTP/2.

    :param url: the card's gRPC URL (``host:port``, or with a scheme).
    :param base_url: the agent's base URL (an https one means TLS for a scheme-less ``url``).
    :param ssl_context: TLS settings (default: httpx's default trust); ALPN ``h2`` is set on
        it, as gRPC needs.
    :param fallback: the JSON-RPC transport for methods without a gRPC rpc.
    """

    version = "1.0"

    def __init__(
        self, url: str, *, base_url: str, timeout: float | None,
        extensions: Sequence[str] = (), headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | None = None,
        on_refused: Callable[[int, bytes], str] | None = None,
        fallback: RpcTransport | None = None, ssl_context: ssl.SSLContext | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES, write_timeout: float = 30.0,
    ) -> None:
        self.url = url
        self.host, self.port, self.tls = grpc_target(url, base_url=base_url)
        self.timeout = timeout
        self.fallback = fallback
        self.auth = auth
        self.max_message_bytes = max_message_bytes
        self.write_timeout = write_timeout
        self._on_refused = on_refused
        self._extensions = tuple(extensions)
        self._headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()
                         if k.lower() not in _RESERVED and not k.lower().startswith("a2a-")]
        self._ssl = ssl_context
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = f"{host}:{self.port}".encode()
        self._conn: H2Client | None = None
        self._connecting = anyio.Lock()
        self.connections = 0
        """How many connections this transport has opened (tests, metrics)."""

    @property
    def where(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://{self.authority.decode()}"

    async def aclose(self) -> None:
        """Close the connection; calls still on it fail with AgentUnreachable."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()

    # --- the two kinds of call ---------------------------------------------------------

    async def call(self, method: str, params: bytes, *, bounded: bool = True) -> bytes:
        """One unary call; return its result as 1.0 JSON (``bounded=False``: the transport's
        ``timeout`` does not apply, an enclosing deadline still goes as ``grpc-timeout``).

        Cancelled, the call is reset (the agent sees a hang-up). Raises as the module says."""
        rpc = methods().get(method)
        if rpc is None or rpc.streaming:
            if self.fallback is None:
                raise UnsupportedOperation(f"{method} has no gRPC method, and the agent card "
                                           "offers no JSON-RPC interface for it")
            return await self.fallback.call(method, params, bounded=bounded)
        body = self._request(rpc, params)
        limit = self.timeout if bounded else None
        trace: dict[str, str] = {}
        try:
            with client_span(method, self.where, trace), anyio.fail_after(limit):
                metadata = self._metadata(method, _remaining(limit), self._extensions, None,
                                          trace)
                async with _Call(self, method, body, metadata) as call:
                    data = await call.unary()
        except TimeoutError:
            raise AgentTimeout(f"the agent at {self.where} did not answer in time") from None
        try:
            return answer_json(data, rpc.response)
        except DecodeError:
            raise InvalidAgentResponse(f"the agent's {method} answer is not a valid "
                                       f"{rpc.response.DESCRIPTOR.name} message") from None

    def stream(self, method: str, params: bytes, *, last_event_id: int | None = None,
               extensions: Sequence[str] = ()) -> _OpenStream:
        """A server-streaming call, as an async context manager handing out a
        :class:`GrpcEvents` source. The transport's timeout covers the answer's headers; an
        up-front error (a status before any message) is raised on entering. Leaving resets a
        call that has not ended."""
        rpc = methods().get(method)
        if rpc is None or not rpc.streaming:
            raise UnsupportedOperation(f"{method} is not a streaming gRPC method")
        body = self._request(rpc, params)
        trace: dict[str, str] = {}
        with client_span(method, self.where, trace):  # marks the opening only
            metadata = self._metadata(method, _remaining(None),
                                      extensions or self._extensions, last_event_id, trace)
        return _OpenStream(self, rpc, body, metadata)

    # --- pieces ------------------------------------------------------------------------

    def _request(self, rpc: RpcMethod, params: bytes) -> bytes:
        try:
            return frame(request_bytes(params, rpc.request))
        except ParseError as exc:
            raise InvalidParams(f"the {rpc.name} params do not fit its gRPC request "
                                f"message: {exc}") from None

    def _metadata(self, method: str, timeout: float | None, extensions: Sequence[str],
                  last_event_id: int | None, trace: Mapping[str, str],
                  ) -> list[tuple[bytes, bytes]]:
        headers = [
            (b":method", b"POST"), (b":scheme", b"https" if self.tls else b"http"),
            (b":path", f"/{SERVICE}/{method}".encode()), (b":authority", self.authority),
            (b"content-type", b"application/grpc"), (b"te", b"trailers"),
            (b"grpc-accept-encoding", b"identity"), (b"user-agent", _USER_AGENT),
            (b"a2a-version", b"1.0"),
        ]
        if timeout is not None:
            headers.append((b"grpc-timeout", format_timeout(timeout).encode()))
        if extensions:
            headers.append((b"a2a-extensions", ", ".join(extensions).encode()))
        if last_event_id is not None:
            headers.append((b"last-event-id", str(last_event_id).encode()))
        headers += [(k.lower().encode(), v.encode()) for k, v in trace.items()]
        return headers + self._headers + auth_metadata(self.auth)

    async def _connection(self) -> H2Client:
        conn = self._conn
        if conn is not None and conn.usable:
            return conn
        async with self._connecting:
            if self._conn is not None and self._conn.usable:
                return self._conn
            context = None
            if self.tls:
                context = self._ssl or httpx.create_ssl_context()
                context.set_alpn_protocols(["h2"])
            try:
                with anyio.fail_after(self.timeout):
                    self._conn = await H2Client.connect(
                        self.host, self.port, ssl_context=context,
                        write_timeout=self.write_timeout)
                    self.connections += 1
            except TimeoutError:
                raise AgentTimeout(f"the agent at {self.where} did not accept a connection "
                                   "in time") from None
            except ConnectionLost as exc:
                raise self.lost(exc, "cannot reach") from exc.__cause__
            return self._conn

    def lost(self, exc: ConnectionLost, what: str = "lost the call to") -> AgentUnreachable:
        return AgentUnreachable(f"{what} the agent at {self.where}: {exc}")

    def status_error(self, code: int, message: str, details: bytes | None) -> Exception:
        """The exception for a call that ended with gRPC status ``code`` (not OK)."""
        if code in (codes.UNAUTHENTICATED_STATUS, codes.PERMISSION_DENIED_STATUS) and \
                self._on_refused is not None:
            status = 401 if code == codes.UNAUTHENTICATED_STATUS else 403
            cls = Unauthenticated if status == 401 else PermissionDenied
            return cls(self._on_refused(status, msgspec.json.encode(
                {"error": {"message": message}})))
        error = codes.error_from_status(code, message, details)
        if error is not None:
            return error
        if code == codes.DEADLINE_EXCEEDED:
            return AgentTimeout(f"the agent at {self.where} did not answer in time "
                                f"(DEADLINE_EXCEEDED{': ' + message if message else ''})")
        return AgentUnreachable(f"the agent at {self.where} ended the call with gRPC status "
                                f"{code}{': ' + message if message else ''}")

    def http_error(self, status: int) -> Exception:
        """An answer that is not gRPC at all (a proxy's, a plain HTTP server's)."""
        if status in (401, 403) and self._on_refused is not None:
            return (Unauthenticated if status == 401 else PermissionDenied)(
                self._on_refused(status, b""))
        if status in (502, 503, 504):
            return AgentUnreachable(f"the agent at {self.where} is unavailable (HTTP {status})")
        return AgentHTTPError(status, "the gRPC call was answered without gRPC")


def _remaining(limit: float | None) -> float | None:
    """The call's ``grpc-timeout``: ``limit``, or what is left of the enclosing deadline."""
    effective = anyio.current_effective_deadline()
    left = None if effective == math.inf else max(0.0, effective - anyio.current_time())
    found = [t for t in (limit, left) if t is not None]
    return min(found) if found else None


class _Call:
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

    async def __aenter__(self) -> _Call:
        for _ in range(_ATTEMPTS):
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
        raise AgentUnreachable(f"the agent at {self.t.where} refused the call {_ATTEMPTS} "
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

    def __init__(self, call: _Call, response: type[Message]) -> None:
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


class _OpenStream:
    """``async with transport.stream(...) as events``: the call opened on entering, reset on
    leaving unless it ended."""

    def __init__(self, transport: GrpcTransport, rpc: RpcMethod, body: bytes,
                 metadata: list[tuple[bytes, bytes]]) -> None:
        self._call = _Call(transport, rpc.name, body, metadata,
                           header_timeout=transport.timeout, peek=True)
        self._rpc = rpc

    async def __aenter__(self) -> GrpcEvents:
        await self._call.__aenter__()
        return GrpcEvents(self._call, self._rpc.response)

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self._call.__aexit__(exc_type, exc, tb)


__all__ = ["GrpcEvents", "GrpcTransport", "auth_metadata", "grpc_target"]
