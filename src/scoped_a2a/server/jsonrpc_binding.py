"""The JSON-RPC binding of A2A (1.0 and 0.3): decoding and answering, nothing else.

A request is one JSON-RPC 2.0 object POSTed to the app's root with ``Content-Type:
application/json``. Its method name says the dialect: a 0.3 name (``message/send``...) is
mapped onto the 1.0 method it stands for and answered in 0.3 shapes, a 1.0 name
(``SendMessage``...) is answered in 1.0 shapes. Either way the call runs through the same
:class:`~.methods.Methods` table and :func:`~.dispatch.run_method` as HTTP+JSON (:mod:`.rest`)
and gRPC (:mod:`.grpc`): holds, detach policy, hang-ups, owner scoping, limits and shutdown are
decided there. Only the answer is this binding's: one JSON-RPC response, or an SSE stream whose
events are JSON-RPC responses.

Errors before the method runs (wrong content type, a body over the limit, unparseable JSON, an
unknown method or version) are answered at once with a JSON-RPC error; the body is drained or
discarded first so the connection stays usable. From then on ``run_method`` owns the call: a
hang-up cancels it, and an answer that cannot be written is dropped, never raised.
"""

from __future__ import annotations

from ..observe.base import NOOP, Observer
from ..protocol.dialect import FROM_V03, V03_DIALECT, V10_DIALECT, check_params, check_version
from ..protocol.errors import A2AError, InvalidRequest, MethodNotFound
from ..protocol.jsonrpc import NO_ID, error_frame, parse_request, result_frame
from ..protocol.method import Call
from ..protocol.principal import ANONYMOUS, Principal
from ..protocol.trajectory import TRAJECTORY_READ_METHOD
from .asgi import Receive, Scope, Send, header, send_response
from .body import BodyBudget, BodyInTooManyPieces, BodyRefused, discard_body
from .closing import ClosingDeadlines, RequestScope
from .dispatch import Responder, extensions, last_event_id, run_method
from .methods import Methods
from .request_body import BodyReader, Refusal
from .sse import SSEWriter


class JsonRpcBinding:
    """Answers the JSON-RPC requests of one app with its method table.

    :param methods: the app's :class:`~.methods.Methods` (the one method layer).
    :param max_body_bytes: larger bodies are refused with 413.
    :param bodies: the app's :class:`~.body.BodyBudget` (body deadline and memory bound).
    :param write_timeout: a stream whose client takes no event for this long is closed.
    :param expose_errors: send the text of a method's exception to the caller (development).
    """

    def __init__(self, methods: Methods, *, max_body_bytes: int, write_timeout: float,
                 expose_errors: bool = False, observe: Observer = NOOP,
                 bodies: BodyBudget | None = None,
                 final_writes: ClosingDeadlines | None = None) -> None:
        self.methods = methods
        self.body = BodyReader(max_body_bytes, bodies, _refusal)
        self.final_writes = final_writes
        self.observe = observe
        self.write_timeout = write_timeout
        self.expose_errors = expose_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send,
                       principal: Principal = ANONYMOUS) -> None:
        """Answer one JSON-RPC request (a POST to the app's root) for ``principal``."""
        ctype = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if ctype != "application/json":
            err: A2AError = InvalidRequest(
                f"Content-Type must be application/json, not {ctype or 'absent'!r}")
            await discard_body(scope, receive)
            await send_response(send, 415, error_frame(b"null", err, v1=True))
            return
        # One cancel scope for the body's first read and the final answer's write
        # (closing.RequestScope); a refusal of the body is answered once out of it.
        request = RequestScope()
        refusal: Refusal | None = None  # (stays None if a deadline ended the request)
        with request.scope:
            refusal = await self._answer(request, scope, receive, send, principal)
        refusal = self.body.refusal(request, refusal)
        if refusal is not None:
            status, frame, headers = refusal
            await send_response(send, status, frame, headers=headers)

    async def _answer(self, request: RequestScope, scope: Scope, receive: Receive, send: Send,
                      principal: Principal) -> Refusal | None:
        """Read the body and answer the call, inside ``request``'s scope; a refused body's
        answer is returned, as data (:mod:`.request_body` says why), not sent: the caller
        sends it out of the scope."""
        body = await self.body.read(scope, receive, request)
        if not isinstance(body, bytes):
            return body  # refused, or None: the client went away
        try:
            rpc = parse_request(body)
        except A2AError as exc:
            await send_response(send, 200, error_frame(exc.id_json, exc, v1=True))  # type: ignore[attr-defined]
            return None
        name = FROM_V03.get(rpc.method)
        dialect = V03_DIALECT if name is not None else V10_DIALECT
        name = name or rpc.method
        self.observe.request_method(rpc.method, "1.0" if dialect.v1 else "0.3")
        out = _JsonRpcOutput(send, rpc.id_json, dialect.v1, self.write_timeout,
                             self.final_writes, request)
        try:
            check_version(header(scope, b"a2a-version") or query_version(scope))
            if name == TRAJECTORY_READ_METHOD:
                handler = self.methods.read_trajectory
            else:
                handler = self.methods.table.get(name)  # type: ignore[assignment]
                if handler is None:
                    raise MethodNotFound(f"method {rpc.method!r} not found")
            if not rpc.has_id:
                # Not executed: the specific error about its params if there is one, else -32600.
                check_params(rpc.method, rpc.params)
                raise InvalidRequest(NO_ID)
        except A2AError as exc:
            await out.error(exc)
            return None
        call = Call(dialect, rpc, extensions(scope), last_event_id(scope), principal)
        await run_method(handler, call, out, receive, rpc.method,
                         expose_errors=self.expose_errors)
        return None


def _refusal(exc: BodyRefused) -> Refusal:
    """A refused body's answer: status, JSON-RPC error frame, headers."""
    err: A2AError = exc.a2a_error()
    if isinstance(exc, BodyInTooManyPieces):
        err = InvalidRequest(f"{exc}; send it in fewer, larger pieces (for example with a "
                             "Content-Length)")
    return exc.http_status, error_frame(b"null", err, v1=True), exc.http_headers()


class _JsonRpcOutput(Responder):
    """Writes a JSON-RPC answer: one JSON response, or an SSE stream started lazily.

    Final answers go through :meth:`~.dispatch.Responder.final_write` (shielded, bounded).
    """

    def __init__(self, send: Send, id_json: bytes, v1: bool, write_timeout: float,
                 closing: ClosingDeadlines | None = None,
                 request: RequestScope | None = None) -> None:
        self._send = send
        self.request = request
        self.closing = closing
        self._id = id_json
        self._v1 = v1
        self.write_timeout = write_timeout
        self._sse = SSEWriter(send, write_timeout=write_timeout)
        self._done = False
        self._envelope = (b'{"jsonrpc":"2.0","id":' + id_json + b',"result":', b"}")

    async def _final(self, body: bytes) -> None:
        self._done = True
        await self.final_write(lambda: send_response(self._send, 200, body))

    async def result(self, result: bytes) -> None:
        await self._final(result_frame(self._id, result))

    async def error(self, exc: A2AError) -> None:
        frame = error_frame(self._id, exc, v1=self._v1)
        if self._sse.started:
            await self._sse.event(frame)
            await self.finish()
        elif not self._done:
            await self._final(frame)


def query_version(scope: Scope) -> str | None:
    """The ``A2A-Version`` given as a query parameter (for clients that cannot set headers)."""
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key.lower() == "a2a-version":
            return value
    return None
