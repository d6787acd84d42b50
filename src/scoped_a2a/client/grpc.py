"""A2A 1.0's gRPC binding, the client side: :class:`GrpcTransport`.

It has the interface of :class:`~.rpc.RpcTransport` (``call`` returning the raw result JSON,
``stream`` handing out what :class:`~.streams.EventStream` reads), so the client and its codecs
do not care which binding carries a call: the 1.0 JSON params the codec builds become the
method's request message and the response message becomes the JSON result again, by the
ProtoJSON conversion the server uses the other way (:mod:`...protocol.grpc.messages`).

Every call is one stream of one HTTP/2 connection per transport (:mod:`.h2conn`, no task of its
own), opened on first use and again after it broke; :mod:`.grpc_call` carries one call over it.
Metadata: ``a2a-version: 1.0``, ``a2a-extensions``, the credential (``authorization``,
``x-api-key``: what ``auth`` would put in HTTP headers), ``last-event-id`` for a resumed
subscription, and ``grpc-timeout``: the transport's ``timeout`` for a bounded call, or what is
left of an enclosing AnyIO deadline, whichever comes first.

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

import ssl
from collections.abc import Callable, Mapping, Sequence

import anyio
import httpx
import msgspec
from google.protobuf.json_format import ParseError
from google.protobuf.message import DecodeError

from ..observe.propagation import client_span
from ..protocol.errors import (
    InvalidAgentResponse,
    InvalidParams,
    PermissionDenied,
    Unauthenticated,
    UnsupportedOperation,
)
from ..protocol.grpc import status as codes
from ..protocol.grpc.framing import format_timeout, frame
from ..protocol.grpc.messages import SERVICE, RpcMethod, answer_json, methods, request_bytes
from ..timeouts import fail_after
from .errors import AgentHTTPError, AgentTimeout, AgentUnreachable
from .grpc_call import GrpcCall, GrpcEvents, OpenStream, remaining
from .h2conn import ConnectionLost, H2Client
from .rpc import RpcTransport

MAX_MESSAGE_BYTES = 64 << 20
"""A response message larger than this is refused (gRPC's own default is 4 MiB)."""
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
            with client_span(method, self.where, trace), fail_after(limit):
                metadata = self._metadata(method, remaining(limit), self._extensions, None,
                                          trace)
                async with GrpcCall(self, method, body, metadata) as call:
                    data = await call.unary()
        except TimeoutError:
            raise AgentTimeout(f"the agent at {self.where} did not answer in time") from None
        try:
            return answer_json(data, rpc.response)
        except DecodeError:
            raise InvalidAgentResponse(f"the agent's {method} answer is not a valid "
                                       f"{rpc.response.DESCRIPTOR.name} message") from None

    def stream(self, method: str, params: bytes, *, last_event_id: int | None = None,
               extensions: Sequence[str] = ()) -> OpenStream:
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
            metadata = self._metadata(method, remaining(None),
                                      extensions or self._extensions, last_event_id, trace)
        return OpenStream(self, rpc, body, metadata)

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
                with fail_after(self.timeout):
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


__all__ = ["GrpcEvents", "GrpcTransport", "auth_metadata", "grpc_target"]
