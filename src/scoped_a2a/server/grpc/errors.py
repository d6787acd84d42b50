"""The gRPC binding's errors: an :class:`A2AError` as a gRPC status (no I/O).

The status code is the specification's table (§5.4) where it has one; the trailers carry the
error's message and a ``google.rpc.Status`` with one ``google.rpc.ErrorInfo`` whose ``reason``
is the one JSON-RPC 1.0 and HTTP+JSON send (``TASK_NOT_FOUND``...) and whose domain is
``a2a-protocol.org``, so a client maps it back to the same error class on every binding.
"""

from __future__ import annotations

from ...protocol.errors import (
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
)
from ...protocol.grpc.messages import error_status
from ...protocol.rest_errors import DOMAIN
from .framing import brief, status_trailers

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
