"""The gRPC binding's errors: an :class:`A2AError` as a gRPC status (no I/O).

The status code is the specification's table (§5.4) where it has one; the trailers carry the
error's message and a ``google.rpc.Status`` with one ``google.rpc.ErrorInfo`` whose ``reason``
is the one JSON-RPC 1.0 and HTTP+JSON send (``TASK_NOT_FOUND``...) and whose domain is
``a2a-protocol.org``, so a client maps it back to the same error class on every binding.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError

from ..errors import (
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
from ..rest_errors import DOMAIN
from .framing import brief, status_trailers
from .messages import error_status, message_class

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
PERMISSION_DENIED_STATUS = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED_STATUS = 16

GRPC_STATUS: dict[int, int] = {
    TASK_NOT_FOUND: NOT_FOUND,
    TASK_NOT_CANCELABLE: FAILED_PRECONDITION,
    PUSH_NOT_SUPPORTED: FAILED_PRECONDITION,
    UNSUPPORTED_OPERATION: FAILED_PRECONDITION,
    CONTENT_TYPE_NOT_SUPPORTED: INVALID_ARGUMENT,
    INVALID_AGENT_RESPONSE: INTERNAL,
    EXTENDED_CARD_NOT_CONFIGURED: FAILED_PRECONDITION,
    EXTENSION_SUPPORT_REQUIRED: FAILED_PRECONDITION,
    VERSION_NOT_SUPPORTED: FAILED_PRECONDITION,
    INVALID_PARAMS: INVALID_ARGUMENT,
    INVALID_REQUEST: INVALID_ARGUMENT,
    PARSE_ERROR: INVALID_ARGUMENT,
    METHOD_NOT_FOUND: UNIMPLEMENTED,
    INTERNAL_ERROR: INTERNAL,
    SERVER_UNAVAILABLE: UNAVAILABLE,
    UNAUTHENTICATED: UNAUTHENTICATED_STATUS,
    PERMISSION_DENIED: PERMISSION_DENIED_STATUS,
    LIMIT_EXCEEDED: RESOURCE_EXHAUSTED,
}
"""JSON-RPC/A2A error code -> gRPC status code (§5.4 for the A2A errors)."""

_BY_REASON = {reason: code for code, reason in _REASONS.items()}
# A status without an ErrorInfo we know (a proxy's, a peer's own) still maps by its code.
# DEADLINE_EXCEEDED, UNAVAILABLE and CANCELLED are not here: they are transport outcomes
# (the client's AgentTimeout / AgentUnreachable), not errors of the agent.
_BY_STATUS = {
    NOT_FOUND: TASK_NOT_FOUND,
    INVALID_ARGUMENT: INVALID_PARAMS,
    FAILED_PRECONDITION: UNSUPPORTED_OPERATION,
    UNIMPLEMENTED: METHOD_NOT_FOUND,
    RESOURCE_EXHAUSTED: LIMIT_EXCEEDED,
    INTERNAL: INTERNAL_ERROR,
    UNKNOWN: INTERNAL_ERROR,
    UNAUTHENTICATED_STATUS: UNAUTHENTICATED,
    PERMISSION_DENIED_STATUS: PERMISSION_DENIED,
}


def grpc_status(exc: A2AError) -> int:
    """The gRPC status code ``exc`` is answered with (INTERNAL for an unknown code)."""
    return GRPC_STATUS.get(exc.code, INTERNAL)


def error_trailers(exc: A2AError) -> list[tuple[bytes, bytes]]:
    """The trailers answering ``exc``: status, message and the ErrorInfo details, every text
    in them cut short (:func:`.framing.brief`: they can echo what the caller sent)."""
    code = grpc_status(exc)
    metadata = ({brief(str(k), 128): brief(str(v), 256) for k, v in list(exc.data.items())[:16]}
                if isinstance(exc.data, dict) else None)
    details = error_status(code, brief(exc.message), _REASONS.get(exc.code, "UNKNOWN"), DOMAIN,
                           metadata)
    return status_trailers(code, exc.message, details)


def error_details(details: bytes) -> list[tuple[str, str, dict[str, str]]]:
    """The ``(reason, domain, metadata)`` of each ErrorInfo in a serialized
    ``google.rpc.Status`` (``grpc-status-details-bin``); ``[]`` for bytes that are not one."""
    try:
        status: Any = message_class("google.rpc.Status").FromString(details)
    except DecodeError:
        return []
    info: Any = message_class("google.rpc.ErrorInfo")()
    found = []
    for detail in status.details:
        if detail.Unpack(info):
            found.append((info.reason, info.domain, dict(info.metadata)))
    return found


def error_from_status(code: int, message: str, details: bytes | None) -> A2AError | None:
    """The :class:`A2AError` a failed call's status carries, or None for a status that is no
    error of the agent's (DEADLINE_EXCEEDED, UNAVAILABLE without an A2A reason, CANCELLED...:
    the caller's transport errors).

    The ErrorInfo ``reason`` decides the class, as on JSON-RPC 1.0 and HTTP+JSON; without a
    known one, the status code does. Never raises.
    """
    for reason, _, metadata in error_details(details) if details else ():
        known = _BY_REASON.get(reason)
        if known is not None:
            return error_from_code(known, message, metadata or None)
    fallback = _BY_STATUS.get(code)
    if fallback is None:
        return None
    return error_from_code(fallback, message or f"gRPC status {code}")
