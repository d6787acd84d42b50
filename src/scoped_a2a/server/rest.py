"""The HTTP+JSON (REST) binding of A2A 1.0: routing and request decoding, nothing else.

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

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import msgspec
from msgspec import inspect as mi

from ..observe.base import NOOP, Observer
from ..protocol.dialect import PARAM_TYPES, V10_DIALECT, check_version
from ..protocol.errors import (
    A2AError,
    ContentTypeNotSupported,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    VersionNotSupported,
)
from ..protocol.jsonrpc import RpcRequest
from ..protocol.method import Call
from ..protocol.principal import ANONYMOUS, Principal
from ..protocol.rest_errors import rest_error_body, rest_status
from .asgi import Receive, Scope, Send, header, send_response
from .body import (
    BodyBudget,
    BodyRefused,
    BodyTooSlow,
    ClientGone,
    ServerClosing,
    discard_body,
    read_body,
)
from .closing import ClosingDeadlines, RequestScope
from .dispatch import Responder, extensions, last_event_id, run_method
from .methods import Methods
from .sse import SSEWriter

REST_PREFIXES = ("/message:", "/tasks", "/extendedAgentCard")
"""Paths that belong to the REST binding (everything else stays with JSON-RPC and the card)."""

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

_encode = msgspec.json.Encoder().encode
_SEG = r"([^/:]+)"


@dataclass(frozen=True, slots=True)
class Route:
    verbs: tuple[str, ...]
    method: str
    """The 1.0 method name this route stands for."""
    path_keys: tuple[str, ...] = ()
    """The params keys the path segments fill (``id``, ``taskId``...)."""
    body: str = "none"
    """``required`` (a JSON object), ``optional`` (may be empty) or ``none`` (ignored)."""
    query: bool = False
    """Whether query parameters are params (GetTask, ListTasks, list of push configs)."""


_ROUTES: list[tuple[re.Pattern[str], Route]] = [
    (re.compile(r"/message:send"), Route(("POST",), "SendMessage", body="required")),
    (re.compile(r"/message:stream"), Route(("POST",), "SendStreamingMessage", body="required")),
    (re.compile(r"/tasks"), Route(("GET",), "ListTasks", query=True)),
    (re.compile(rf"/tasks/{_SEG}"), Route(("GET",), "GetTask", ("id",), query=True)),
    (re.compile(rf"/tasks/{_SEG}:cancel"), Route(("POST",), "CancelTask", ("id",),
                                                 body="optional")),
    (re.compile(rf"/tasks/{_SEG}:subscribe"), Route(("GET", "POST"), "SubscribeToTask",
                                                    ("id",), body="optional")),
    (re.compile(rf"/tasks/{_SEG}/pushNotificationConfigs"),
     Route(("POST",), "CreateTaskPushNotificationConfig", ("taskId",), body="required")),
    (re.compile(rf"/tasks/{_SEG}/pushNotificationConfigs"),
     Route(("GET",), "ListTaskPushNotificationConfigs", ("taskId",), query=True)),
    (re.compile(rf"/tasks/{_SEG}/pushNotificationConfigs/{_SEG}"),
     Route(("GET",), "GetTaskPushNotificationConfig", ("taskId", "id"))),
    (re.compile(rf"/tasks/{_SEG}/pushNotificationConfigs/{_SEG}"),
     Route(("DELETE",), "DeleteTaskPushNotificationConfig", ("taskId", "id"))),
    (re.compile(r"/extendedAgentCard"), Route(("GET",), "GetExtendedAgentCard")),
]


def split_tenant(path: str) -> tuple[str | None, str]:
    """``(tenant, route path)``: 1.0 serves every route under an optional ``/{tenant}`` prefix."""
    if path.startswith(REST_PREFIXES):
        return None, path
    head, sep, rest = path[1:].partition("/")
    # ``/v1/...`` is the 0.3 REST dialect's prefix, which is not served: not a tenant named v1.
    # ``path`` is the ASGI scope's, which the server has already percent-decoded: decoding it
    # again would make ``/%2541/`` tenant ``A`` instead of ``%41``.
    if head and head != "v1" and sep and ("/" + rest).startswith(REST_PREFIXES):
        return head, "/" + rest
    return None, path


def is_rest_path(path: str) -> bool:
    """True for a path the REST binding answers (it may still be a 404 or 405 there)."""
    return split_tenant(path)[1].startswith(REST_PREFIXES)


def match(verb: str, path: str) -> tuple[Route, tuple[str, ...]] | tuple[None, list[str]]:
    """The route and its path segments; else ``(None, verbs allowed on the path)``."""
    allowed: list[str] = []
    for pattern, route in _ROUTES:
        m = pattern.fullmatch(path)
        if m is None:
            continue
        if verb in route.verbs or (verb == "HEAD" and "GET" in route.verbs):
            return route, m.groups()
        allowed.extend(route.verbs)
    return None, allowed


def query_params(query: str, method: str) -> dict[str, Any]:
    """Query parameters as the method's params (``pageSize=5`` -> ``{"pageSize": 5}``).

    Names may be the JSON names or the proto names; values are converted to the field's type
    (numbers, ``true``/``false``, comma-separated or repeated lists); the last of repeated
    scalar values wins. Unknown names (``A2A-Version``, say) are ignored. A value that does not
    convert is kept as a string, so the typed decode that follows reports it by field name.
    """
    info = mi.type_info(PARAM_TYPES[method])
    assert isinstance(info, mi.StructType)
    fields = {}
    for f in info.fields:
        fields[f.encode_name] = f
        fields[f.name] = f
    out: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=False):
        field = fields.get(key)
        if field is None:
            continue
        out[field.encode_name] = _convert(value, field.type, out.get(field.encode_name))
    return out


def _convert(value: str, type_: mi.Type, previous: Any) -> Any:
    if isinstance(type_, mi.UnionType):  # X | None
        inner = [t for t in type_.types if not isinstance(t, mi.NoneType)]
        type_ = inner[0] if len(inner) == 1 else type_
    if isinstance(type_, mi.ListType):
        items = [v for v in value.split(",") if v]
        return [*(previous or []), *(_convert(v, type_.item_type, None) for v in items)]
    if isinstance(type_, mi.BoolType):
        lowered = value.lower()
        return {"true": True, "false": False, "1": True, "0": False}.get(lowered, value)
    if isinstance(type_, mi.IntType):
        try:
            return int(value)
        except ValueError:
            return value
    return value


def _body_object(body: bytes) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(body) if body.strip() else {}
    except (msgspec.DecodeError, RecursionError):
        raise ParseError("the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidRequest("the body must be a JSON object")
    return value


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
        self.max_body_bytes = max_body_bytes
        self.bodies = bodies
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
        answer: _Answer | None = None  # (stays None if a deadline ended the request)
        if route.body == "none":  # no body to read: no scope to share (a write takes its own)
            answer = await self._answer(scope, receive, send, route, segments, tenant,
                                        principal, media, None)
        else:
            # One cancel scope for the body's first read and a blocking send's final write
            # (closing.RequestScope, as in jsonrpc_binding); a refusal is answered out of it.
            request = RequestScope()
            with request.scope:
                answer = await self._answer(scope, receive, send, route, segments, tenant,
                                            principal, media, request)
            if request.read_expired:  # the deadline cancelled (or ended) the first read
                assert self.bodies is not None  # only a budget arms it
                answer = _refused(ServerClosing() if self.bodies.closing
                                  else BodyTooSlow(self.bodies.timeout))
        if answer is not None:
            status, body, headers = answer
            await _respond(send, status, body, headers=headers, media=media)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, route: Route,
                      segments: tuple[str, ...], tenant: str | None, principal: Principal,
                      media: bytes, request: RequestScope | None) -> _Answer | None:
        """Read the body and answer the call (inside ``request``'s scope if there is one); an
        answer decided before the method runs is returned, not sent: the caller sends it out
        of the scope. Returned as data, never as the exception: a kept exception's traceback
        would hold the body read so far in a reference cycle (jsonrpc_binding._answer)."""
        try:
            body = await self._body(scope, receive, route, request)
        except _Answered as answered:
            return answered.status, answered.body, answered.headers
        except ClientGone:
            return None
        try:
            _check_version(scope)
            params = self._params(scope, route, segments, body, tenant)
        except A2AError as exc:
            await _respond(send, rest_status(exc), rest_error_body(exc), media=media)
            return None
        handler = self.methods.table.get(route.method)
        if handler is None:  # not in the table: a method this server was built without
            err = MethodNotFound(f"{route.method} is not served by this agent")
            await _respond(send, 404, rest_error_body(err), media=media)
            return None
        call = Call(V10_DIALECT, RpcRequest(b"null", route.method, params),
                    extensions(scope), last_event_id(scope), principal)
        out = _RestOutput(send, self.write_timeout, self.final_writes, media, request)
        await run_method(handler, call, out, receive, route.method,
                         expose_errors=self.expose_errors)
        return None

    async def _body(self, scope: Scope, receive: Receive, route: Route,
                    request: RequestScope | None = None) -> bytes:
        if route.body == "none":
            await discard_body(scope, receive)
            return b""
        ctype = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if (ctype and ctype not in JSON_TYPES) or (route.body == "required" and not ctype):
            await discard_body(scope, receive)
            err = ContentTypeNotSupported(
                f"Content-Type must be application/json or application/a2a+json, not "
                f"{ctype or 'absent'!r}")
            raise _Answered(415, rest_error_body(err, http_status=415))
        try:
            return await read_body(
                scope, receive, self.max_body_bytes, budget=self.bodies,
                first=(self.bodies.first_read(request)
                       if self.bodies is not None and request is not None else None))
        except BodyRefused as exc:
            raise _Answered(*_refused(exc)) from None

    def _params(self, scope: Scope, route: Route, segments: tuple[str, ...],
                body: bytes, tenant: str | None = None) -> msgspec.Raw:
        """The method's params from the body, the query and the path (``tenant``: the path's
        ``/{tenant}`` prefix, which must agree with a ``tenant`` in the body)."""
        if route.body == "required" and not route.path_keys and tenant is None:
            # message:send / message:stream: the body is the params as it stands (no re-encode:
            # the method's typed decode judges it, malformed JSON included, as a 400).
            if not body.strip():
                raise InvalidParams("the body must be a SendMessageRequest JSON object")
            return msgspec.Raw(body)
        params: dict[str, Any] = _body_object(body) if route.body != "none" else {}
        if route.query:
            params.update(query_params(bytes(scope.get("query_string", b"")).decode("latin-1"),
                                       route.method))
        params.update(zip(route.path_keys, segments, strict=True))
        if tenant is not None:
            if params.get("tenant") not in (None, "", tenant):
                raise InvalidParams(f"the path names tenant {tenant!r}, the body another one")
            params["tenant"] = tenant
        return msgspec.Raw(_encode(params))


async def _respond(send: Send, status: int, body: bytes,
                   headers: list[tuple[bytes, bytes]] | None = None,
                   media: bytes = MEDIA_TYPE) -> None:
    await send_response(send, status, body, content_type=media, headers=headers or ())


_Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
"""An answer decided before the method runs: status, REST error body, headers."""


def _refused(exc: BodyRefused) -> _Answer:
    return (exc.http_status, rest_error_body(exc.a2a_error(), http_status=exc.http_status),
            exc.http_headers())


class _Answered(Exception):
    """An answer decided before the method runs (a refused body, 415)."""

    def __init__(self, status: int, body: bytes,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or []


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



def _check_version(scope: Scope) -> None:
    """As on JSON-RPC, except that the REST routes served are 1.0 ones: an absent version is
    taken as 1.0 (0.3's REST routes live under ``/v1/`` and are not served)."""
    value = header(scope, b"a2a-version") or _query_value(scope, "a2a-version")
    if value is not None and value.strip().startswith("0."):
        raise VersionNotSupported(
            f"A2A-Version {value.strip()!r} is not served over HTTP+JSON here; send 1.0, or "
            "use JSON-RPC (POST /) for 0.3")
    check_version(value)


def _query_value(scope: Scope, name: str) -> str | None:
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    for key, value in parse_qsl(query):
        if key.lower() == name:
            return value
    return None


__all__ = ["A2A_MEDIA_TYPE", "MEDIA_TYPE", "REST_PREFIXES", "RestBinding", "answer_type",
           "is_rest_path", "match", "query_params"]
