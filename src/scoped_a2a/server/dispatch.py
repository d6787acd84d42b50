"""Running one method call inside its request's task group, for every binding.

JSON-RPC and HTTP+JSON differ only in how they parse a request and encode its answer (their
:class:`Responder`); the ownership of the call is the same and lives here once: the method runs
beside the disconnect watcher in one task group per request, so a caller that hangs up cancels
the method, which releases its holds on runs (an interactive run no one else holds is then
cancelled with reason ``hang-up``; a detached one carries on in the server nursery).
"""

from __future__ import annotations

import logging

import anyio

from ..protocol.errors import A2AError
from ..protocol.method import (
    BAD_LAST_EVENT_ID,
    MAX_EVENT_ID_DIGITS,
    Call,
    Method,
    Output,
)
from ..runtime.failures import failure_text, new_error_id
from .asgi import Receive, Scope, header
from .disconnect import watch_disconnect
from .sse import SlowConsumer

log = logging.getLogger("scoped_a2a.server")


class Responder(Output):
    """An :class:`Output` that can also answer an error and end the answer."""

    async def error(self, exc: A2AError) -> None:
        raise NotImplementedError

    async def finish(self) -> None:
        raise NotImplementedError


async def run_method(handler: Method, call: Call, out: Responder, receive: Receive,
                     label: str, *, expose_errors: bool = False) -> None:
    """Run ``handler(call, out)`` in the request's task group with the disconnect watcher.

    An :class:`A2AError` is answered through ``out.error``; any other exception is logged
    (``label`` names the call) with an error id, and answered as an internal error carrying the
    exception's type and that id, never its text unless ``expose_errors`` (failures.py). A
    client that stopped reading its stream is logged and its stream closed. On a hang-up the
    watcher cancels the group: the method is cancelled and nothing is answered. Returns once the
    answer is complete (the watcher is then cancelled).
    """
    async with anyio.create_task_group() as request:
        request.start_soon(watch_disconnect, receive, request.cancel_scope)
        try:
            await handler(call, out)
        except A2AError as exc:
            await out.error(exc)
        except SlowConsumer:
            log.warning("closed a stream whose client stopped reading (task stream %s)", label)
        except Exception as exc:
            # The text may hold internals: the caller gets the type and an id that finds
            # this log line (failures.py), unless the app exposes errors.
            error_id = new_error_id()
            log.exception("%s failed (error id %s)", label, error_id)
            text = failure_text(exc, error_id, expose=expose_errors)
            await out.error(A2AError(f"internal error: {text}"))
        else:
            await out.finish()
        request.cancel_scope.cancel()


def extensions(scope: Scope) -> frozenset[str]:
    """The extension URIs a request activates (``A2A-Extensions``)."""
    raw = header(scope, b"a2a-extensions") or header(scope, b"x-a2a-extensions") or ""
    return frozenset(x.strip() for x in raw.split(",") if x.strip())


def last_event_id(scope: Scope) -> int | None:
    """The ``Last-Event-ID`` header as a log position; :data:`BAD_LAST_EVENT_ID` if malformed.

    Only ASCII digits, at most :data:`MAX_EVENT_ID_DIGITS` of them, are a position. Anything else
    (``²`` passes ``str.isdigit()`` but not ``int()``; 5,000 digits exceed ``int()``'s limit) is
    reported, not raised here: the methods that resume from it answer -32602 naming the header.
    """
    raw = header(scope, b"last-event-id")
    if raw is None or not raw.strip():
        return None
    value = raw.strip()
    if len(value) > MAX_EVENT_ID_DIGITS or not (value.isascii() and value.isdigit()):
        return BAD_LAST_EVENT_ID
    return int(value)
