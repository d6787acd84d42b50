"""Which HTTP+JSON (REST) route a request is, and the params it carries: the request side
of the REST binding (:mod:`.rest`), with no I/O.

:func:`match` finds the route (after :func:`split_tenant` took an optional ``/{tenant}``
prefix off the path); :func:`route_params` merges the path segments, the query parameters and
the JSON body into the params object of the 1.0 JSON-RPC method the route stands for, so the
method's own typed decode judges them as it does a JSON-RPC call's. Nothing here waits, so
nothing here is cancelled; bad input raises the A2A error the binding answers with (400).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import msgspec
from msgspec import inspect as mi

from ..protocol.dialect import PARAM_TYPES, check_version
from ..protocol.errors import InvalidParams, InvalidRequest, ParseError, VersionNotSupported
from .asgi import Scope, header

REST_PREFIXES = ("/message:", "/tasks", "/extendedAgentCard")
"""Paths that belong to the REST binding (everything else stays with JSON-RPC and the card)."""

_encode = msgspec.json.Encoder().encode
_SEG = r"([^/:]+)"


@dataclass(frozen=True, slots=True)
class Route:
    """One REST route: the verbs it takes, and where its method's params come from."""

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


def route_params(scope: Scope, route: Route, segments: tuple[str, ...], body: bytes,
                 tenant: str | None = None) -> msgspec.Raw:
    """The method's params from the body, the query and the path (``tenant``: the path's
    ``/{tenant}`` prefix, which must agree with a ``tenant`` in the body).

    Raises :class:`~..protocol.errors.InvalidParams` (``ParseError``, ``InvalidRequest`` for
    a body that is not a JSON object) for the binding to answer as a 400."""
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


def check_rest_version(scope: Scope) -> None:
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


__all__ = ["REST_PREFIXES", "Route", "check_rest_version", "is_rest_path", "match",
           "query_params", "route_params", "split_tenant"]
