"""Work-arounds for hypercorn's HTTP/2 layer (``H2Protocol``, 0.17/0.18), installed by
:func:`.hypercorn_fixes.install` on the versions it has checked. Each patch is one bug:

A. **PRIORITY frames for streams that do not exist end the server (trio).** hypercorn inserts
   the stream named by every PRIORITY frame into its priority tree (``priority`` package,
   capped at 1,000 streams) and never removes one no request opened. The 1,001st raises
   ``TooManyStreamsError`` out of the connection: on trio it ends the whole server, on asyncio
   the connection drops with an unhandled-exception log. 14 KB of frames on one connection
   did it. Now a PRIORITY frame for a stream that is not open is ignored (RFC 9113 deprecates
   the scheme; ignoring it is allowed) and counts against the connection's budget (C), and a
   priority-tree error that still escapes closes that connection with GOAWAY instead of
   raising.
B. **A DATA frame for a stream already answered raises ``KeyError``** (a client still sending
   a body the app refused): asyncio drops the connection with every request on it, trio can
   end the whole server. Such frames are dropped (their flow control is still acknowledged).
C. **Rapid reset (CVE-2023-44487).** A client may open a stream and reset it at once, so
   ``MAX_CONCURRENT_STREAMS`` never bounds it: each such stream still starts an ASGI request.
   3,000 of them in one burst cost the server 3.4-4.0 s of CPU. Each connection now has a
   budget (a token bucket: :data:`CALM_BURST` at once, refilled at :data:`CALM_PER_SECOND`)
   of streams the client resets and PRIORITY frames for streams not open. Past it the
   connection is closed with GOAWAY ``ENHANCE_YOUR_CALM``, and the frames after the one that
   overdrew are not processed (no request is started for them). A client that resets now and
   then never comes near it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

CALM_BURST = 200
"""Client resets (and PRIORITY frames for unopened streams) a connection may send at once."""
CALM_PER_SECOND = 100.0
"""...and the rate at which that allowance refills."""


def install() -> None:
    """Patch hypercorn's ``H2Protocol`` (call once; :func:`.hypercorn_fixes.install` does)."""
    from hypercorn.protocol.h2 import H2Protocol

    _forget_data_for_closed_streams(H2Protocol)
    _bound_priority_and_resets(H2Protocol)


# --- B. DATA for a stream that has been answered -------------------------------------------


class _GoneStream:
    """Stands in for an HTTP/2 stream hypercorn has closed: what arrives for it is dropped."""

    async def handle(self, event: Any) -> None:
        return None


class _Streams(dict[int, Any]):
    """hypercorn's table of open HTTP/2 streams, where a closed stream's id reads as gone."""

    def __missing__(self, stream_id: int) -> Any:
        return _GoneStream()


def _forget_data_for_closed_streams(protocol_class: Any) -> None:
    init: Callable[..., None] = protocol_class.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.streams = _Streams(self.streams)

    protocol_class.__init__ = __init__


# --- A and C. PRIORITY frames for unopened streams, and rapid reset ------------------------


class CalmBudget:
    """A token bucket: ``take()`` is False once more than ``burst`` were taken faster than
    ``per_second`` refills them."""

    def __init__(self, burst: float = CALM_BURST, per_second: float = CALM_PER_SECOND) -> None:
        self.burst = burst
        self.per_second = per_second
        self._tokens = burst
        self._at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


def _bound_priority_and_resets(protocol_class: Any) -> None:
    import h2.errors
    import h2.events
    import priority.priority

    handle: Callable[[Any, Any], Awaitable[None]] = protocol_class.handle
    handle_events: Callable[[Any, list[Any]], Awaitable[None]] = protocol_class._handle_events
    priority_updated: Callable[[Any, Any], Awaitable[None]] = protocol_class._priority_updated

    async def enhance_your_calm(self: Any) -> None:
        # What hypercorn does for a protocol error, with a GOAWAY saying why.
        from hypercorn.events import Closed

        self.connection.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        await self._flush()
        await self.send(Closed())

    async def _handle_events(self: Any, events: list[Any]) -> None:
        budget: CalmBudget | None = getattr(self, "_scoped_a2a_calm", None)
        if budget is None:
            budget = self._scoped_a2a_calm = CalmBudget()
        opened: set[int] = set()
        for index, event in enumerate(events):
            if isinstance(event, h2.events.RequestReceived):
                opened.add(event.stream_id)
            costly = (
                (isinstance(event, h2.events.StreamReset) and event.remote_reset)
                or (isinstance(event, h2.events.PriorityUpdated)
                    and event.stream_id not in opened
                    and event.stream_id not in self.stream_buffers)
            )
            if costly and not budget.take():
                await handle_events(self, events[:index])
                await enhance_your_calm(self)
                return
        await handle_events(self, events)

    async def _priority_updated(self: Any, event: Any) -> None:
        # A stream hypercorn has no buffer for is not open (not yet, or no longer): inserting
        # it would fill the priority tree with entries nothing ever removes.
        if event.stream_id in self.stream_buffers:
            await priority_updated(self, event)

    async def guarded_handle(self: Any, event: Any) -> None:
        try:
            await handle(self, event)
        except priority.priority.PriorityError:
            # Whatever still upsets the priority tree is this client's doing: close its
            # connection rather than let the error end the server (trio) or go unhandled.
            await enhance_your_calm(self)

    protocol_class._handle_events = _handle_events
    protocol_class._priority_updated = _priority_updated
    protocol_class.handle = guarded_handle
