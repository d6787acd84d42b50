"""The HTTP+JSON (REST) binding of A2A 1.0: routing, request decoding and answers, nothing else
(the routes and their params: :mod:`.rest_routes`; the body read: :mod:`.request_body`).

Each route is turned into the 1.0 JSON-RPC method it stands for, with the params that method
takes (path segments, query parameters and the JSON body merged into one object), and runs
through the same :class:`~.methods.Methods` table and :func:`~.dispatch.run_method` as JSON-RPC.
So every rule (holds, detach policy, hang-ups, limits, shutdown) is the JSON-RPC one; only the
answer differs: the bare result JSON (``200``), SSE events whose ``data`` is a bare
``StreamResponse``, and errors as an HTTP status with a ``google.rpc.Status`` body
(:mod:`..protocol.rest_errors`). An error after a stream has started is one ``event: error``
whose data is that body, then the stream ends.

Routes (relative to the app's root, each also under a ``/{tenant}`` prefix)::

    POST   /message:send                          SendMessage
    POST   /message:stream                        SendStreamingMessage (SSE)
    GET    /tasks/{id}?historyLength=             GetTask
    GET    /tasks?contextId=&status=&pageSize=... ListTasks
    POST   /tasks/{id}:cancel                     CancelTask
    GET|POST /tasks/{id}:subscribe                SubscribeToTask (SSE, Last-Event-ID)
    POST   /tasks/{id}/pushNotificationConfigs    CreateTaskPushNotificationConfig
    GET    /tasks/{id}/pushNotificationConfigs    ListTaskPushNotificationConfigs
    GET    /tasks/{id}/pushNotificationConfigs/{configId}   GetTaskPushNotificationConfig
    DELETE /tasks/{id}/pushNotificationConfigs/{configId}   DeleteTaskPushNotificationConfig
    GET    /extendedAgentCard                     GetExtendedAgentCard
"""

from __future__ import annotations

from ..observe.base import NOOP, Observer
from ..protocol.dialect import V10_DIALECT
from ..protocol.errors import A2AError, ContentTypeNotSupported, MethodNotFound
from ..protocol.jsonrpc import RpcRequest
from ..protocol.method import Call
from ..protocol.principal import ANONYMOUS, Principal
from ..protocol.rest_errors import rest_error_body, rest_status
from .asgi import Receive, Scope, Send, header, send_response
from .body import BodyBudget, BodyRefused, discard_body
from .closing import ClosingDeadlines, RequestScope
from .dispatch import Responder, extensions, last_event_id, run_method
from .methods import Methods
from .request_body import BodyReader, Refusal
from .rest_routes import (
    REST_PREFIXES,
    Route,
    check_rest_version,
    is_rest_path,
    match,
    query_params,
    route_params,
    split_tenant,
)
from .sse import SSEWriter

MEDIA_TYPE = b"application/json"
"""The media type of REST answers (errors included) to callers that send plain JSON, or say
nothing: what spec 1.0.0 §11.1 named ("Content-Type: application/json for requests and
responses"), and what clients written from it (the conformance kit's HTTP_JSON-SVC-001) check."""
A2A_MEDIA_TYPE = b"application/a2a+json"
"""Spec 1.0.1 §11.1: "application/a2a+json SHOULD be used for requests and responses". A
request that uses it is answered with it (:func:`answer_type`)."""
JSON_TYPES = ("application/json", "application/a2a+json")
"""Request bodies may be either."""


def answer_type(scope: Scope) -> bytes:
    """The media type to answer a REST request with: the one the request used. A body sent
    as ``application/a2a+json`` (or, with no body, an ``Accept`` that names it and not
    ``application/json``) gets ``application/a2a+json``; everything else ``application/json``,
    as before spec 1.0.1."""
    ctype = (header(scope, b"content-type") or "").partition(";")[0].strip().lower()
    if ctype:
        return A2A_MEDIA_TYPE if ctype == A2A_MEDIA_TYPE.decode() else MEDIA_TYPE
    accept = (header(scope, b"accept") or "").lower()
    wanted = [item.partition(";")[0].strip() for item in accept.split(",")]
    if A2A_MEDIA_TYPE.decode() in wanted and MEDIA_TYPE.decode() not in wanted:
        return A2A_MEDIA_TYPE
    return MEDIA_TYPE


class RestBinding:
    """Answers the REST routes of one app with its method table.

    :param methods: the app's :class:`~.methods.Methods` (the one method layer).
    :param max_body_bytes: larger bodies are refused with 413.
    :param bodies: the app's :class:`~.body.BodyBudget` (body deadline and memory bound).
    :param write_timeout: a stream whose client takes no event for this long is closed.
    """

    def __init__(self, methods: Methods, *, max_body_bytes: int, write_timeout: float,
                 expose_errors: bool = False, observe: Observer = NOOP,
                 bodies: BodyBudget | None = None,
                 final_writes: ClosingDeadlines | None = None) -> None:
        self.methods = methods
        self.observe = observe
        self.body = BodyReader(max_body_bytes, bodies, _refused)
        self.final_writes = final_writes
        self.write_timeout = write_timeout
        self.expose_errors = expose_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send, path: str,
                       principal: Principal = ANONYMOUS) -> None:
        """Answer one REST request at ``path`` (relative to the app's root).

        Errors before the method runs are answered at once (the body is drained or discarded
        first); from then on :func:`~.dispatch.run_method` owns the call, so a hang-up cancels it.
        """
        verb = scope.get("method", "GET")
        media = answer_type(scope)
        tenant, path = split_tenant(path)
        route, found = match(verb, path)
        if route is None:
            await discard_body(scope, receive)
            if found:
                err: A2AError = MethodNotFound(
                    f"{verb} is not allowed on {path}; use {' or '.join(sorted(set(found)))}")
                allow = ", ".join(sorted(set(found))).encode()
                await _respond(send, 405, rest_error_body(err, http_status=405),
                               headers=[(b"allow", allow)], media=media)
            else:
                err = MethodNotFound(f"no A2A HTTP+JSON route {verb} {path}")
                await _respond(send, 404, rest_error_body(err), media=media)
            return
        segments = tuple(str(s) for s in found)
        self.observe.request_method(route.method, "1.0", "HTTP+JSON")
        if route.body == "none":  # no body to read: no scope to share (a write takes its own)
            await discard_body(scope, receive)
            await self._call(None, scope, receive, send, route, segments, tenant, principal,
                             media, b"")
            return
        ctype = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if (ctype and ctype not in JSON_TYPES) or (route.body == "required" and not ctype):
            await discard_body(scope, receive)
            err = ContentTypeNotSupported(
                f"Content-Type must be application/json or application/a2a+json, not "
                f"{ctype or 'absent'!r}")
            await _respond(send, 415, rest_error_body(err, http_status=415), media=media)
            return
        # One cancel scope for the body's first read and a blocking send's final write
        # (request_body.BodyReader, as in jsonrpc_binding); a refusal is answered out of it.
        request = RequestScope()
        refusal: Refusal | None = None  # (stays None if a deadline ended the request)
        with request.scope:
            refusal = await self._answer(request, scope, receive, send, route, segments,
                                         tenant, principal, media)
        refusal = self.body.refusal(request, refusal)
        if refusal is not None:
            status, body, headers = refusal
            await _respond(send, status, body, headers=headers, media=media)

    async def _answer(self, request: RequestScope, scope: Scope, receive: Receive, send: Send,
                      route: Route, segments: tuple[str, ...], tenant: str | None,
                      principal: Principal, media: bytes) -> Refusal | None:
        """Read the body and answer the call inside ``request``'s scope; a refused body's
        answer is returned, as data (:mod:`.request_body` says why), not sent: the caller
        sends it out of the scope."""
        body = await self.body.read(scope, receive, request)
        if not isinstance(body, bytes):
            return body  # refused, or None: the client went away
        await self._call(request, scope, receive, send, route, segments, tenant, principal,
                         media, body)
        return None

    async def _call(self, request: RequestScope | None, scope: Scope, receive: Receive,
                    send: Send, route: Route, segments: tuple[str, ...], tenant: str | None,
                    principal: Principal, media: bytes, body: bytes) -> None:
        """Answer the call whose body has been read: a bad version or bad params at once
        (400), else through :func:`~.dispatch.run_method`, which owns it from then on (a
        hang-up cancels it; an answer that cannot be written is dropped, never raised)."""
        try:
            check_rest_version(scope)
            params = route_params(scope, route, segments, body, tenant)
        except A2AError as exc:
            await _respond(send, rest_status(exc), rest_error_body(exc), media=media)
            return
        handler = self.methods.table.get(route.method)
        if handler is None:  # not in the table: a method this server was built without
            err = MethodNotFound(f"{route.method} is not served by this agent")
            await _respond(send, 404, rest_error_body(err), media=media)
            return
        call = Call(V10_DIALECT, RpcRequest(b"null", route.method, params),
                    extensions(scope), last_event_id(scope), principal)
        out = _RestOutput(send, self.write_timeout, self.final_writes, media, request)
        await run_method(handler, call, out, receive, route.method,
                         expose_errors=self.expose_errors)


async def _respond(send: Send, status: int, body: bytes,
                   headers: list[tuple[bytes, bytes]] | None = None,
                   media: bytes = MEDIA_TYPE) -> None:
    await send_response(send, status, body, content_type=media, headers=headers or ())


def _refused(exc: BodyRefused) -> Refusal:
    """A refused body's answer: status, REST error body, headers."""
    return (exc.http_status, rest_error_body(exc.a2a_error(), http_status=exc.http_status),
            exc.http_headers())


class _RestSSE(SSEWriter):
    async def error_event(self, data: bytes) -> None:
        """``event: error`` carrying a REST error body (what the a2a-sdk REST client reads)."""
        await self._write(b"event: error\ndata: " + data + b"\n\n")


class _RestOutput(Responder):
    """Writes a method's answer as REST: bare JSON, bare SSE events, HTTP-status errors."""

    _sse: _RestSSE

    def __init__(self, send: Send, write_timeout: float,
                 closing: ClosingDeadlines | None = None, media: bytes = MEDIA_TYPE,
                 request: RequestScope | None = None) -> None:
        self._send = send
        self.request = request
        self._media = media
        self.write_timeout = write_timeout
        self.closing = closing
        self._sse = _RestSSE(send, write_timeout=write_timeout)
        self._done = False

    async def _final(self, status: int, body: bytes) -> None:
        self._done = True
        await self.final_write(lambda: _respond(self._send, status, body, media=self._media))

    async def result(self, result: bytes) -> None:
        # DeleteTaskPushNotificationConfig's JSON-RPC result is null; REST answers ``{}``.
        await self._final(200, b"{}" if result == b"null" else result)

    async def error(self, exc: A2AError) -> None:
        if self._sse.started:
            await self._sse.error_event(rest_error_body(exc))
            await self.finish()
        elif not self._done:
            await self._final(rest_status(exc), rest_error_body(exc))



__all__ = ["A2A_MEDIA_TYPE", "MEDIA_TYPE", "REST_PREFIXES", "RestBinding", "answer_type",
           "is_rest_path", "match", "query_params"]  # (the route names: rest_routes.py's)
