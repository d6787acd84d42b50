"""JSON-RPC and A2A error codes, and the exception that carries one (no I/O).

Every error a client can see is an :class:`A2AError`: the server turns it into a JSON-RPC error
object, and the client raises it (or a subclass) from a JSON-RPC error answer, so both sides share
one vocabulary.
"""

from __future__ import annotations

from typing import Any, ClassVar

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
EXTENDED_CARD_NOT_CONFIGURED = -32007
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009
# Implementation-defined server error (the JSON-RPC range -32000..-32099).
SERVER_UNAVAILABLE = -32000
# No A2A code exists for authentication (the spec says "JSON-RPC custom error"): ours sit in the
# implementation-defined range and echo the HTTP statuses they travel with (401, 403).
UNAUTHENTICATED = -32040
PERMISSION_DENIED = -32043
# A per-caller limit (runs working or parked) refused new work; retry once one ends.
LIMIT_EXCEEDED = -32029

# google.rpc.ErrorInfo reasons used in 1.0 error.data.
_REASONS = {
    PARSE_ERROR: "PARSE_ERROR",
    INVALID_REQUEST: "INVALID_REQUEST",
    METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    INVALID_PARAMS: "INVALID_PARAMS",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    PUSH_NOT_SUPPORTED: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    CONTENT_TYPE_NOT_SUPPORTED: "CONTENT_TYPE_NOT_SUPPORTED",
    INVALID_AGENT_RESPONSE: "INVALID_AGENT_RESPONSE",
    EXTENDED_CARD_NOT_CONFIGURED: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    EXTENSION_SUPPORT_REQUIRED: "EXTENSION_SUPPORT_REQUIRED",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
    SERVER_UNAVAILABLE: "SERVER_UNAVAILABLE",
    UNAUTHENTICATED: "UNAUTHENTICATED",
    PERMISSION_DENIED: "PERMISSION_DENIED",
    LIMIT_EXCEEDED: "RESOURCE_EXHAUSTED",
}


class A2AError(Exception):
    """An error with a JSON-RPC code; raised by handlers, and by the client for remote errors."""

    code: ClassVar[int] = INTERNAL_ERROR

    def __init__(self, message: str, *, code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code  # type: ignore[misc]  # instance override of the class default
        self.message = message
        self.data = data

    def to_jsonrpc(self, *, v1: bool) -> dict[str, Any]:
        """The JSON-RPC ``error`` member; 1.0 adds an ErrorInfo list in ``data``."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        elif v1:
            err["data"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": _REASONS.get(self.code, "UNKNOWN"),
                    "domain": "a2a-protocol.org",
                }
            ]
        return err


class ParseError(A2AError):
    code = PARSE_ERROR


class InvalidRequest(A2AError):
    code = INVALID_REQUEST


class MethodNotFound(A2AError):
    code = METHOD_NOT_FOUND


class InvalidParams(A2AError):
    code = INVALID_PARAMS


class TaskNotFound(A2AError):
    code = TASK_NOT_FOUND


class TaskNotCancelable(A2AError):
    code = TASK_NOT_CANCELABLE


class PushNotSupported(A2AError):
    code = PUSH_NOT_SUPPORTED


class UnsupportedOperation(A2AError):
    code = UNSUPPORTED_OPERATION


class ContentTypeNotSupported(A2AError):
    code = CONTENT_TYPE_NOT_SUPPORTED


class InvalidAgentResponse(A2AError):
    """The agent answered something that is not a valid A2A answer (raised by the client)."""

    code = INVALID_AGENT_RESPONSE


class ExtendedCardNotConfigured(A2AError):
    code = EXTENDED_CARD_NOT_CONFIGURED


class ExtensionSupportRequired(A2AError):
    code = EXTENSION_SUPPORT_REQUIRED


class VersionNotSupported(A2AError):
    code = VERSION_NOT_SUPPORTED


class ServerUnavailable(A2AError):
    """The server refuses new work (it is shutting down, or its store is unreachable).

    ``lasting``: the cause will not clear by itself (a full disk, a file that became read-only):
    callers waiting for a write to get through are answered at once instead of waiting."""

    code = SERVER_UNAVAILABLE
    lasting: bool = False


class Unauthenticated(A2AError):
    """No credential, or one that does not verify (malformed, expired, wrong key or audience).

    Raised by authenticators; the server answers HTTP 401 with a fixed text (the message given
    here goes to the server log only, so it may say what was wrong).
    """

    code = UNAUTHENTICATED
    status: ClassVar[int] = 401


class PermissionDenied(A2AError):
    """A valid credential whose principal may not call this agent (HTTP 403, fixed text)."""

    code = PERMISSION_DENIED
    status: ClassVar[int] = 403


class LimitExceeded(A2AError):
    """The caller has as many runs (working or parked) as a per-caller limit allows."""

    code = LIMIT_EXCEEDED


_BY_CODE: dict[int, type[A2AError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        TaskNotFound,
        TaskNotCancelable,
        PushNotSupported,
        UnsupportedOperation,
        ContentTypeNotSupported,
        InvalidAgentResponse,
        ExtendedCardNotConfigured,
        ExtensionSupportRequired,
        VersionNotSupported,
        ServerUnavailable,
        Unauthenticated,
        PermissionDenied,
        LimitExceeded,
    )
}


def error_from_code(code: int, message: str, data: Any = None) -> A2AError:
    """The most specific :class:`A2AError` subclass for a remote error code."""
    cls = _BY_CODE.get(code, A2AError)
    return cls(message, code=code, data=data)
