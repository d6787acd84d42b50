"""What a remote caller is told when an agent (or the server) raises.

An exception's text often holds internals: a database URL, a file path, a customer's data. By
default a caller sees only the exception's type and a short error id; the same id is in the log
line that carries the traceback, so an operator can find it. An agent that means to tell the
caller why it failed raises :class:`AgentError`, whose message is sent as is. ``expose=True``
(``A2AApp(expose_errors=True)``, ``serve --expose-errors``) sends every exception's full text,
for development.
"""

from __future__ import annotations

import secrets


class AgentError(Exception):
    """Raise from an agent to fail its task with a message meant for the caller.

    ``raise AgentError("the CRM rejected the lead: duplicate email")`` ends the task ``failed``
    with exactly that text as its status message. Any other exception is reported to the
    caller as its type and an error id only (unless the app exposes errors).
    """


def new_error_id() -> str:
    """A short random hex id that ties a caller's error to the server's log line."""
    return secrets.token_hex(4)


def failure_text(exc: BaseException, error_id: str, *, expose: bool) -> str:
    """The text a remote caller sees for ``exc``.

    :class:`AgentError`: its message. ``expose``: ``"Type: message"``. Otherwise the type and
    ``error_id`` only.
    """
    if isinstance(exc, AgentError):
        return str(exc) or "the agent failed"
    name = type(exc).__name__
    if expose:
        return f"{name}: {exc}"
    return f"{name} (error id {error_id}); the server log has the details"
