"""What the client raises when an agent cannot be reached or answers badly.

Remote A2A errors (a JSON-RPC ``error`` answer) are raised as the shared
:class:`~scoped_a2a.protocol.errors.A2AError` subclasses, carrying the JSON-RPC ``code``: the
client and the server speak one error vocabulary. This module adds the failures that never reach
JSON-RPC: the connection failed, timed out, or the agent answered with an HTTP error status.
"""

from __future__ import annotations

from ..protocol.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    VERSION_NOT_SUPPORTED,
    A2AError,
    TaskNotFound,
)


class TransportError(Exception):
    """The agent could not be reached, or answered outside JSON-RPC (a base class)."""


class AgentUnreachable(TransportError):
    """Connecting failed, the connection broke, or the agent closed it without answering."""


class AgentTimeout(AgentUnreachable):
    """The agent did not answer within the deadline."""


class AgentHTTPError(TransportError):
    """The agent answered with an HTTP status other than 200 and no JSON-RPC error."""

    def __init__(self, status_code: int, detail: str = "") -> None:
        self.status_code = status_code
        self.detail = detail
        super().__init__(f"HTTP {status_code}" + (f": {detail}" if detail else ""))


# JSON-RPC codes that no retry can fix: the agent does not know the method, or rejects the call.
_PERMANENT_CODES = frozenset(
    {METHOD_NOT_FOUND, INVALID_PARAMS, INVALID_REQUEST, VERSION_NOT_SUPPORTED}
)


def is_task_gone(exc: BaseException) -> bool:
    """True when the answer says the agent no longer knows the task (the 404-style answer)."""
    if isinstance(exc, TaskNotFound):
        return True
    return isinstance(exc, AgentHTTPError) and exc.status_code in (404, 410)


def is_permanent(exc: BaseException) -> bool:
    """True for failures a retry cannot fix (the agent refuses the call itself)."""
    if isinstance(exc, A2AError):
        return exc.code in _PERMANENT_CODES or exc.code == UNSUPPORTED_OPERATION
    return isinstance(exc, AgentHTTPError) and exc.status_code in (400, 401, 403, 405, 415)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: transport trouble, 5xx, internal errors, garbage."""
    return isinstance(exc, (TransportError, A2AError)) and not (
        is_task_gone(exc) or is_permanent(exc)
    )
