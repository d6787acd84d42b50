"""The HTTP+JSON (REST) binding's errors: HTTP status and ``google.rpc.Status`` body (no I/O).

An :class:`A2AError` is answered on REST as an HTTP status plus the JSON form of a
``google.rpc.Status``::

    {"error": {"code": 404, "status": "NOT_FOUND", "message": "...",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                            "metadata": {}}]}}

The statuses are the specification's table (1.0.1 §5.4, "MUST be mapped", each the HTTP
status of its ``google.rpc.Code``): 400 for TaskNotCancelableError and
ContentTypeNotSupportedError, 500 for InvalidAgentResponseError (1.0.0's table said 409, 415 and
502; A2A commit 757f0ec6, #1627, changed them, as the a2a-sdk 1.3 answers); plus 503 for a server
that refuses new work. A body whose own ``Content-Type`` is wrong is HTTP's 415 (server/rest.py),
not this table's. Clients pick the error class by the ErrorInfo reason, so either works.
The ``reason`` is the same ErrorInfo reason JSON-RPC 1.0 puts in ``error.data``, so a client
maps a REST error back to the same :class:`A2AError` subclass it would get over JSON-RPC
(:func:`error_from_rest`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .errors import (
    _REASONS,
    CONTENT_TYPE_NOT_SUPPORTED,
    EXTENDED_CARD_NOT_CONFIGURED,
    EXTENSION_SUPPORT_REQUIRED,
    INTERNAL_ERROR,
    INVALID_AGENT_RESPONSE,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LIMIT_EXCEEDED,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PERMISSION_DENIED,
    PUSH_NOT_SUPPORTED,
    SERVER_UNAVAILABLE,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNAUTHENTICATED,
    UNSUPPORTED_OPERATION,
    VERSION_NOT_SUPPORTED,
    A2AError,
    error_from_code,
)

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
DOMAIN = "a2a-protocol.org"

REST_STATUS: dict[int, tuple[int, str]] = {
    TASK_NOT_FOUND: (404, "NOT_FOUND"),
    METHOD_NOT_FOUND: (404, "NOT_FOUND"),
    TASK_NOT_CANCELABLE: (400, "FAILED_PRECONDITION"),
    PUSH_NOT_SUPPORTED: (400, "FAILED_PRECONDITION"),
    UNSUPPORTED_OPERATION: (400, "FAILED_PRECONDITION"),
    EXTENDED_CARD_NOT_CONFIGURED: (400, "FAILED_PRECONDITION"),
    EXTENSION_SUPPORT_REQUIRED: (400, "FAILED_PRECONDITION"),
    VERSION_NOT_SUPPORTED: (400, "FAILED_PRECONDITION"),
    INVALID_PARAMS: (400, "INVALID_ARGUMENT"),
    INVALID_REQUEST: (400, "INVALID_ARGUMENT"),
    PARSE_ERROR: (400, "INVALID_ARGUMENT"),
    CONTENT_TYPE_NOT_SUPPORTED: (400, "INVALID_ARGUMENT"),
    INVALID_AGENT_RESPONSE: (500, "INTERNAL"),
    INTERNAL_ERROR: (500, "INTERNAL"),
    SERVER_UNAVAILABLE: (503, "UNAVAILABLE"),
    UNAUTHENTICATED: (401, "UNAUTHENTICATED"),
    PERMISSION_DENIED: (403, "PERMISSION_DENIED"),
    LIMIT_EXCEEDED: (429, "RESOURCE_EXHAUSTED"),
}
"""JSON-RPC/A2A error code -> (HTTP status, google.rpc code name)."""

_encode = msgspec.json.Encoder().encode
_BY_REASON = {reason: code for code, reason in _REASONS.items()}
# A reason-less error body (a proxy's, say) still maps by its status name.
_BY_STATUS = {"NOT_FOUND": TASK_NOT_FOUND, "INVALID_ARGUMENT": INVALID_PARAMS,
              "FAILED_PRECONDITION": UNSUPPORTED_OPERATION, "UNAVAILABLE": SERVER_UNAVAILABLE}


def rest_status(exc: A2AError) -> int:
    """The HTTP status ``exc`` is answered with on REST (500 for an unknown code)."""
    return REST_STATUS.get(exc.code, (500, "INTERNAL"))[0]


def rest_error_body(exc: A2AError, *, http_status: int | None = None) -> bytes:
    """The JSON error body for ``exc``; ``http_status`` overrides the mapped status (413, 415)."""
    status, name = REST_STATUS.get(exc.code, (500, "INTERNAL"))
    metadata = exc.data if isinstance(exc.data, dict) else {}
    error: dict[str, Any] = {
        "code": http_status or status,
        "status": name,
        "message": exc.message,
        "details": [{"@type": ERROR_INFO_TYPE, "reason": _REASONS.get(exc.code, "UNKNOWN"),
                     "domain": DOMAIN, "metadata": metadata}],
    }
    return _encode({"error": error})


class _Info(msgspec.Struct):
    reason: str | None = None
    type: str | None = msgspec.field(default=None, name="@type")
    metadata: Any = None


class _Status(msgspec.Struct):
    message: str = ""
    status: str | None = None
    details: list[_Info] | None = None


class _Body(msgspec.Struct):
    error: _Status | str


_body_decoder = msgspec.json.Decoder(_Body)


def error_from_rest(http_status: int, body: bytes) -> A2AError | None:
    """The :class:`A2AError` a REST error answer carries, or None if ``body`` is not one.

    The ErrorInfo ``reason`` decides the class (as on JSON-RPC 1.0); without one, the status
    name does. Never raises.
    """
    try:
        decoded = _body_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if isinstance(decoded.error, str):
        return None
    err = decoded.error
    code: int | None = None
    data: Any = None
    for info in err.details or ():
        if info.type == ERROR_INFO_TYPE and info.reason:
            code = _BY_REASON.get(info.reason)
            data = info.metadata or None
            break
    if code is None and err.status is not None:
        code = _BY_STATUS.get(err.status)
    if code is None:
        return None
    return error_from_code(code, err.message or f"HTTP {http_status}", data)
