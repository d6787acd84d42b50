"""Running one method call inside its request's task group, for every binding.

JSON-RPC and HTTP+JSON differ only in how they parse a request and encode its answer (their
:class:`Responder`); the ownership of the call is the same and lives here once: the method runs
beside the disconnect watcher in one task group per request, so a caller that hangs up cancels
the method, which releases its holds on runs (an interactive run no one else holds is then
cancelled with reason ``hang-up``; a detached one carries on in the server nursery).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType

import anyio

from ..protocol.dialect import Frame
from ..protocol.errors import A2AError
from ..protocol.method import (
    BAD_LAST_EVENT_ID,
    MAX_EVENT_ID_DIGITS,
    Call,
    Method,
    Output,
    Watching,
)
from ..runtime.failures import failure_text, new_error_id
from .asgi import Receive, Scope, header
from .closing import ClosingDeadlines, LazyDeadline, RequestScope
from .disconnect import DisconnectWatcher
from .eager import bounded
from .sse import SlowConsumer, SSEWriter

log = logging.getLogger("scoped_a2a.server")


HANGUP_WAIT = 0.5
"""Seconds a blocking send whose caller hung up waits for its task to end before answering."""
HANGUP_WRITE = 2.0
"""...and seconds it then has to write that answer (the client may be gone: nobody reads)."""
FINAL_WRITE_CLOSING = 5.0
"""Seconds a final answer still being written may take once the server shuts down (the answers
of a shutdown take milliseconds; this is for a client that stopped reading)."""


class Responder(Output):
    """An :class:`Output` that can also answer an error, end the answer, and answer a caller
    that hung up (or only half-closed) before the method could.

    Bindings write their final answer (a whole response, or the end of a stream) through
    :meth:`final_write`: shielded, within ``write_timeout``, so once the final write has begun a
    hang-up no longer cuts it, and hypercorn's own close of the connection (which on trio it
    may run inside that very ``send()``, for ``Connection: close`` or a half-closed client) is
    not interrupted. A final write that hits the deadline is abandoned.
    """

    write_timeout: float = 30.0
    closing: ClosingDeadlines | None = None
    """The app's final-write deadlines, cut short at shutdown (None: ``write_timeout`` only)."""
    request: RequestScope | None = None
    """The request's own cancel scope, which the final write arms if it waits (set by the
    binding; None: the write takes a scope of its own)."""
    _on_hangup: Callable[[float], Awaitable[bytes]] | None = None

    async def error(self, exc: A2AError) -> None:
        raise NotImplementedError

    async def finish(self) -> None:
        """End a started stream (shielded); nothing to do for a whole response."""
        if self._sse.started and not self._done:
            self._done = True
            await self.final_write(self._sse.close)

    # Set by each binding's __init__: its SSE writer and whether a final answer went out.
    _sse: SSEWriter
    _done: bool = False

    def answered(self) -> bool:
        """Whether an answer was written or a stream was started (nothing more to answer)."""
        return self._done or self._sse.started

    # Set by each binding: what wraps a shared event body on this stream (JSON-RPC: the
    # envelope with the request's id; HTTP+JSON: nothing).
    _envelope: tuple[bytes, bytes] = (b"", b"")

    async def event(self, result: bytes | Frame, event_id: int | None) -> None:
        if isinstance(result, Frame) and event_id is not None:
            # The shared body is spliced in by the writer, never joined into a per-stream copy.
            before, after = self._envelope
            await self._sse.result(result, event_id, before=before, after=after)
        else:
            data = result.joined() if isinstance(result, Frame) else result
            before, after = self._envelope
            await self._sse.event(before + data + after, event_id)

    async def events(self, frames: Sequence[tuple[Frame, int]]) -> None:
        """Several events in as few writes as possible (:meth:`.SSEWriter.results`)."""
        before, after = self._envelope
        await self._sse.results(frames, before=before, after=after)

    async def keepalive(self) -> None:
        await self._sse.keepalive()

    async def start_stream(self) -> None:
        await self._sse.start()

    def write_deadline(self) -> AbstractContextManager[None]:
        return self._sse.write_deadline()

    def rest(self, seconds: float) -> None:
        self._sse.rest(seconds)

    async def final_write(self, write: Callable[[], Awaitable[None]]) -> None:
        """Run ``write`` (the final answer's sends) shielded, within ``write_timeout``, and
        within :data:`FINAL_WRITE_CLOSING` once the server shuts down (``closing``): a client
        that stopped reading would otherwise hold the process for the whole timeout."""
        # The scope is made only if the write waits (eager.py): a whole answer that the
        # server takes at once needs no deadline and no shield. A method that runs in the
        # request's own task (``watches_hangup``: no task group between the request's scope
        # and here) writes in the request's scope (closing.RequestScope, set by the binding)
        # rather than a scope of its own; its deadline passing cancels the request's scope:
        # the method ends there, with no answer.
        if self._receive is not None and self.request is not None and self.closing is not None:
            await bounded(write(), self.request.writing(self.closing, self.write_timeout))
            return
        await bounded(write(), LazyDeadline(self.write_timeout, shield=True)
                      if self.closing is None
                      else self.closing.scope(self.write_timeout, shield=True, lazy=True))

    def answer_on_hangup(self, answer: Callable[[float], Awaitable[bytes]]) -> None:
        self._on_hangup = answer

    async def answer_after_hangup(self) -> None:
        """If a hang-up cancelled the method before it answered, answer as it registered.

        Shielded, within ``HANGUP_WAIT + HANGUP_WRITE`` seconds: a half-closed client reads
        its final task (canceled with reason hang-up, or completed if it ended first); for a
        client that is gone the write goes nowhere. Errors are logged, not raised.
        """
        answer, self._on_hangup = self._on_hangup, None
        if answer is None or self.answered():
            return
        self.write_timeout = HANGUP_WRITE  # the answer's own shielded write: not 30 s here
        with anyio.move_on_after(HANGUP_WAIT + HANGUP_WRITE, shield=True):
            try:
                await self.result(await answer(HANGUP_WAIT))
            except A2AError as exc:
                await self.error(exc)
            except Exception:
                log.exception("answering a caller that hung up failed")


    # --- methods that watch for the hang-up themselves (protocol/method.py) ---------------

    _receive: Receive | None = None  # set by run_method for such a method

    async def until_hangup(self, wake: anyio.CancelScope) -> bool:
        assert self._receive is not None, "only for a method marked watches_hangup"
        with wake:
            while True:
                if (await self._receive())["type"] == "http.disconnect":
                    return True
        return False

    def watching(self) -> _Watching:
        assert self._receive is not None, "only for a method marked watches_hangup"
        return _Watching(self._receive)


class _Watching:
    """``async with``: a task group whose disconnect watcher cancels the body on a hang-up;
    the block then ends quietly, with ``hung_up`` set on what it yields."""

    __slots__ = ("_group", "_receive", "_watcher", "_watching")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._group = anyio.create_task_group()
        self._watching = Watching()
        self._watcher: DisconnectWatcher | None = None

    async def __aenter__(self) -> Watching:
        group = await self._group.__aenter__()
        self._watcher = DisconnectWatcher(self._receive, group.cancel_scope)
        group.start_soon(self._watcher.run)
        return self._watching

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> bool:
        assert self._watcher is not None
        self._watcher.stop()
        if exc_val is not None and not isinstance(exc_val, anyio.get_cancelled_exc_class()):
            # The body's error (an A2AError is the caller's answer): end the group without
            # it, so that it goes on unwrapped (a task group would wrap it in a group).
            await self._group.__aexit__(None, None, None)
            return False
        try:
            return bool(await self._group.__aexit__(exc_type, exc_val, exc_tb))
        finally:
            # The watcher cancels the group's scope only on a hang-up.
            self._watching.hung_up = self._group.cancel_scope.cancel_called


async def run_method(handler: Method, call: Call, out: Responder, receive: Receive,
                     label: str, *, expose_errors: bool = False) -> None:
    """Run ``handler(call, out)`` in the request's task group with the disconnect watcher.

    An :class:`A2AError` is answered through ``out.error``; any other exception is logged
    (``label`` names the call) with an error id, and answered as an internal error carrying the
    exception's type and that id, never its text unless ``expose_errors`` (failures.py). A
    client that stopped reading its stream is logged and its stream closed. On a hang-up the
    watcher cancels the group: the method is cancelled, and a method that registered an answer
    for that case (:meth:`Responder.answer_on_hangup`: a blocking send) still writes its final
    task under a short shielded deadline, since a half-closed client looks like a hang-up until
    we write. Returns once the answer is complete (the watcher is then cancelled).
    """
    if getattr(handler, "watches_hangup", False):
        # The method reads the connection itself while it waits (a blocking send): no
        # watcher task, no task group (protocol/method.py, watches_hangup).
        out._receive = receive
        await _call(handler, call, out, label, expose_errors)
    else:
        async with anyio.create_task_group() as request:
            watcher = DisconnectWatcher(receive, request.cancel_scope)
            request.start_soon(watcher.run)
            await _call(handler, call, out, label, expose_errors)
            watcher.stop()
    await out.answer_after_hangup()


async def _call(handler: Method, call: Call, out: Responder, label: str,
                expose_errors: bool) -> None:
    """``handler(call, out)``, its errors answered (see :func:`run_method`)."""
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
