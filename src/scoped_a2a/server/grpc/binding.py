"""The gRPC binding of A2A 1.0 (``lf.a2a.v1.A2AService``): decoding and routing, nothing else.

A request arrives on HTTP/2 at ``/lf.a2a.v1.A2AService/<Method>`` with ``content-type:
application/grpc``. Its one protobuf message is turned into ProtoJSON, which is exactly the
params the 1.0 method of the same name takes on JSON-RPC and HTTP+JSON, and the call runs
through the same :class:`~..methods.Methods` table and :func:`~..dispatch.run_method`: holds,
detach policy, hang-ups, owner scoping, limits and shutdown are the other bindings' rules. Only
the answer differs (:mod:`.output`): protobuf messages, and the status in the trailers
(:mod:`...protocol.grpc.status`).

Before decoding, the request message's fields are counted on the wire
(:mod:`...protocol.grpc.census`): more than ``max_fields`` is RESOURCE_EXHAUSTED, nesting past
100 messages or bytes that are no protobuf message INVALID_ARGUMENT, so no message holds the
event loop for longer than its first ``max_fields`` fields take.

Metadata (HTTP/2 headers): ``a2a-version`` (absent: 1.0; a 0.x version is refused, the 0.3
gRPC service is another one), ``a2a-extensions``, credentials as on every binding
(``authorization``, the API key header; mTLS from the connection), ``last-event-id`` for a
resumed ``SubscribeToTask``, and ``grpc-timeout``, the call's deadline from its arrival (a
malformed one is ignored). On a send it becomes the run's deadline (the deadline extension's
budget, unless the request's metadata gives an earlier one), and the send answers as the run
ended (canceled, reason ``deadline``; status OK). Every other method runs in a cancel scope
with that deadline: when it passes first, the method is cancelled and the call ends
DEADLINE_EXCEEDED, after the messages a stream already sent (a stream cut inside a message is
reset instead: :meth:`.output.GrpcOutput.expired`).

Cancellation: once the method runs, a client that cancels its call (RST_STREAM) or drops the
connection is a hang-up exactly as on HTTP/1.1: hypercorn delivers ``http.disconnect`` and the
disconnect watcher cancels the call, which ends an interactive run and leaves a detached one.
A deadline that cancels a method releases its holds the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
from google.protobuf.message import DecodeError

from ...observe.base import NOOP, Observer
from ...protocol.deadline import BUDGET_KEY
from ...protocol.dialect import V10_DIALECT, check_version
from ...protocol.errors import (
    A2AError,
    InvalidParams,
    LimitExceeded,
    PermissionDenied,
    ServerUnavailable,
    Unauthenticated,
    VersionNotSupported,
)
from ...protocol.grpc.census import Malformed, TooDeep, TooManyFields, count_fields
from ...protocol.grpc.framing import (
    CONTENT_TYPE,
    PREFIX,
    CompressedWithoutEncoding,
    UnsupportedEncoding,
    one_message,
    status_trailers,
)
from ...protocol.grpc.framing import timeout_seconds as _timeout_seconds
from ...protocol.grpc.messages import SERVICE, methods, to_json
from ...protocol.grpc.status import DEADLINE_EXCEEDED, INTERNAL, UNIMPLEMENTED
from ...protocol.jsonrpc import RpcRequest
from ...protocol.method import Call
from ..asgi import Receive, Scope, Send, header
from ..auth import Authenticate, resolve_principal
from ..body import (
    BodiesOverBudget,
    BodyBudget,
    BodyRefused,
    BodyTooLarge,
    BodyTooSlow,
    ClientGone,
    discard_body,
    read_body,
)
from ..closing import ClosingDeadlines
from ..dispatch import extensions, last_event_id, run_method
from ..methods import Methods
from . import DEFAULT_MAX_FIELDS
from .output import EncodedCache, GrpcOutput

_encode = msgspec.json.Encoder().encode
_SENDS = ("SendMessage", "SendStreamingMessage")


_ACCEPTED = ("application/grpc", "application/grpc+proto")
"""The content types decoded as gRPC with protobuf messages (parameters after ``;`` allowed)."""


def grpc_media_type(scope: Scope) -> str | None:
    """The request's media type (lower case, parameters dropped) when it is an HTTP/2 request
    in the gRPC family (``application/grpc`` and every ``application/grpc...`` suffix, but not
    gRPC-Web, which is another protocol); None otherwise."""
    if scope.get("http_version") != "2":
        return None
    ctype = (header(scope, b"content-type") or "").partition(";")[0].strip().lower()
    if not ctype.startswith(CONTENT_TYPE.decode()) or ctype.startswith("application/grpc-web"):
        return None
    return ctype


def is_grpc(scope: Scope) -> bool:
    """Whether an ASGI request is a gRPC call this binding decodes: HTTP/2 and ``content-type:
    application/grpc`` or ``application/grpc+proto`` (parameters allowed). Other codecs
    (``+json``) and look-alikes (``application/grpcx``) are not: :class:`GrpcBinding` refuses
    them (HTTP 415) rather than decode their bytes as protobuf."""
    return grpc_media_type(scope) in _ACCEPTED


async def _refuse_media_type(scope: Scope, receive: Receive, send: Send, ctype: str) -> None:
    """HTTP 415 for a gRPC-family content type this server does not decode, as the gRPC
    protocol asks of a server (so no HTTP/2 client takes a gRPC error answered 200 for a
    success). The message is the body (text) and, for gRPC clients that read it from the
    headers, ``grpc-message`` with ``grpc-status`` UNIMPLEMENTED. The body is discarded."""
    await discard_body(scope, receive)
    text = (f"content-type {ctype[:100]!r} is not served: gRPC calls here send application/grpc "
            "or application/grpc+proto (protobuf messages)")
    body = text.encode()
    await send({"type": "http.response.start", "status": 415, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *status_trailers(UNIMPLEMENTED, text)]})
    await send({"type": "http.response.body", "body": body})


class GrpcBinding:
    """Answers the gRPC calls of one app with its method table.

    :param methods: the app's :class:`~..methods.Methods` (the one method layer).
    :param authenticate: the app's authenticator (None: every caller is anonymous).
    :param max_body_bytes: a larger request message is refused (RESOURCE_EXHAUSTED).
    :param max_fields: a request message holding more protobuf fields (nested ones, repeated
        elements and map entries included: :mod:`~...protocol.grpc.census`) is refused
        (RESOURCE_EXHAUSTED) before it is decoded.
    :param write_timeout: a stream whose client takes nothing for this long is closed.
    :param bodies: the app's :class:`~..body.BodyBudget`: a request message must arrive within
        its deadline (else DEADLINE_EXCEEDED) and within the server-wide bound on unfinished
        bodies (else UNAVAILABLE, retryable).
    :param refused: called for every request refused for its credentials (the app counts).
    """

    def __init__(self, methods: Methods, *, authenticate: Authenticate | None = None,
                 max_body_bytes: int = 8 << 20, max_fields: int = DEFAULT_MAX_FIELDS,
                 write_timeout: float = 30.0,
                 expose_errors: bool = False, observe: Observer = NOOP,
                 refused: Callable[[], None] | None = None,
                 bodies: BodyBudget | None = None,
                 final_writes: ClosingDeadlines | None = None) -> None:
        self.methods = methods
        self.bodies = bodies
        self.final_writes = final_writes
        self.authenticate = authenticate
        self.max_body_bytes = max_body_bytes
        self.max_fields = max_fields
        self.write_timeout = write_timeout
        self.expose_errors = expose_errors
        self.observe = observe
        self._refused = refused
        self.encoded = EncodedCache()
        """Stream events encoded once for every gRPC stream that sends them."""

    def accepts(self, scope: Scope) -> bool:
        """Whether the request is this binding's to answer: an HTTP/2 request with a content
        type of the gRPC family (:func:`grpc_media_type`). Only :func:`is_grpc` ones are
        decoded; the others are refused here."""
        return grpc_media_type(scope) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one gRPC call. Errors before the method runs are answered at once (the
        request body discarded); from then on :func:`~..dispatch.run_method` owns the call,
        so a hang-up cancels it. Never raises for a bad request."""
        began = anyio.current_time()  # grpc-timeout counts from the call's arrival
        ctype = grpc_media_type(scope)
        if ctype not in _ACCEPTED:
            await _refuse_media_type(scope, receive, send, str(ctype))
            return
        service, _, name = str(scope.get("path") or "").lstrip("/").partition("/")
        rpc = methods().get(name) if service == SERVICE else None
        handler = self.methods.table.get(name) if rpc is not None else None
        if rpc is None or handler is None:
            await discard_body(scope, receive)
            out = GrpcOutput(send, methods()["GetTask"].response, self.write_timeout,
                             closing=self.final_writes)
            await out.status(status_trailers(
                UNIMPLEMENTED, f"no method {scope.get('path')!r}: this server serves "
                f"{SERVICE} (A2A 1.0)"))
            return
        out = GrpcOutput(send, rpc.response, self.write_timeout, self.encoded,
                         closing=self.final_writes)
        self.observe.request_method(name, "1.0", "GRPC")
        try:
            principal = await resolve_principal(self.authenticate, scope)
        except (Unauthenticated, PermissionDenied, ServerUnavailable) as exc:
            if self._refused is not None and not isinstance(exc, ServerUnavailable):
                self._refused()
            await discard_body(scope, receive)
            await out.error(exc)
            return
        timeout = _timeout_seconds(header(scope, b"grpc-timeout"))
        deadline = math.inf if timeout is None else began + timeout
        body = b""
        try:
            with anyio.CancelScope(deadline=deadline) as reading:
                body = await read_body(scope, receive, self.max_body_bytes + PREFIX.size,
                                       budget=self.bodies)
        except BodyTooSlow as exc:  # the server's body deadline, before the caller's
            await out.status(status_trailers(DEADLINE_EXCEEDED, str(exc)))
            return
        except BodyRefused as exc:
            await out.error(self._refusal(exc))
            return
        except ClientGone:
            return
        if reading.cancelled_caught:
            assert timeout is not None  # only grpc-timeout sets that deadline
            await out.status(status_trailers(DEADLINE_EXCEEDED, (
                f"the request message did not arrive within the call's grpc-timeout "
                f"({timeout:g} s)")))
            return
        try:
            _check_version(scope)
            params = self._params(scope, rpc.request, body, name, deadline)
        except A2AError as exc:
            await out.error(exc)
            return
        except CompressedWithoutEncoding:
            await out.status(status_trailers(
                INTERNAL, "the message is flagged compressed but the request names no "
                "compression: send grpc-encoding gzip, or clear the flag"))
            return
        except UnsupportedEncoding as exc:
            await out.status(status_trailers(
                UNIMPLEMENTED, f"grpc-encoding {exc} is not supported; send identity or gzip"))
            return
        call = Call(V10_DIALECT, RpcRequest(b"null", name, msgspec.Raw(params)),
                    extensions(scope), last_event_id(scope), principal)
        # A send's deadline is its run's (_params): the send answers as the run ends.
        with anyio.CancelScope(deadline=math.inf if name in _SENDS else deadline) as calling:
            await run_method(handler, call, out, receive, name,
                             expose_errors=self.expose_errors)
        if calling.cancelled_caught and timeout is not None:
            await out.expired(status_trailers(DEADLINE_EXCEEDED, _expired_message(
                timeout, rpc.streaming)))

    def _refusal(self, exc: BodyRefused) -> A2AError:
        """The error for a request message refused while it arrived: too large for the limit
        or for what the server holds (RESOURCE_EXHAUSTED, naming the limit without the 5-byte
        frame prefix), or no room now (UNAVAILABLE, retryable)."""
        if isinstance(exc, BodiesOverBudget):
            return exc.a2a_error()
        if type(exc) is BodyTooLarge and exc.limit is not None:
            limit = min(exc.limit, self.max_body_bytes)
            return LimitExceeded(f"the request message exceeds {limit} bytes")
        return LimitExceeded(str(exc))

    def _params(self, scope: Scope, request: Any, body: bytes, name: str,
                deadline: float) -> bytes:
        """The method's params: the request message as ProtoJSON, plus, on a send, the call's
        ``grpc-timeout`` (``deadline``, on AnyIO's clock) as the run's budget."""
        data = one_message(body, header(scope, b"grpc-encoding"), self.max_body_bytes)
        try:
            count_fields(data, request.DESCRIPTOR, self.max_fields)
            params = to_json(request.FromString(data))
        except TooManyFields as exc:
            raise LimitExceeded(
                f"the request message holds more than {exc.limit} protobuf fields (every "
                "metadata entry and structured-data value counts); send large structured data "
                "as a file part") from None
        except TooDeep as exc:
            raise InvalidParams(
                f"the request message nests messages more than {exc.limit} deep (each level "
                "of a list or object in metadata or data is two); flatten it") from None
        except (DecodeError, Malformed):
            raise InvalidParams(f"the request is not a valid {request.DESCRIPTOR.name} "
                                "message") from None
        if deadline != math.inf and name in _SENDS:
            _give_budget(params, max(0.0, deadline - anyio.current_time()))
        return _encode(params)


def _give_budget(params: dict[str, Any], timeout: float) -> None:
    """Put the call's ``grpc-timeout`` in the request metadata as the deadline extension's
    budget, unless the caller set an earlier (or a malformed, to be refused as such) one."""
    metadata = params.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        return  # not an object: the method's typed decode refuses it
    given = metadata.get(BUDGET_KEY)
    ms = timeout * 1000.0
    if given is None or (isinstance(given, (int, float)) and not isinstance(given, bool)
                         and math.isfinite(given) and given > ms):
        metadata[BUDGET_KEY] = ms


def _expired_message(timeout: float, streaming: bool) -> str:
    """DEADLINE_EXCEEDED's message: what ran out, and what the caller can do."""
    if streaming:
        return (f"the stream reached its grpc-timeout ({timeout:g} s) before the task ended; "
                "subscribe again to go on, or send a longer grpc-timeout")
    return (f"the call was not answered within its grpc-timeout ({timeout:g} s); retry with a "
            "longer grpc-timeout")


def _check_version(scope: Scope) -> None:
    """``a2a-version``: absent is 1.0 here (this service is 1.0's); 0.x is refused."""
    value = header(scope, b"a2a-version")
    if value is not None and value.strip().startswith("0."):
        raise VersionNotSupported(
            f"a2a-version {value.strip()!r} is not served over gRPC here; send 1.0 (this is "
            f"the 1.0 service {SERVICE})")
    check_version(value if value is not None else "1.0")


__all__ = ["GrpcBinding", "is_grpc"]
