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
D. **No back-pressure.** An app's ``send()`` on an HTTP/2 stream puts the bytes in the
   stream's buffer, which is to make the app wait above 32 KiB; but the sender task releases
   the waiting app after every piece it takes from the buffer that is smaller than 16 KiB,
   and with no flow-control window it takes nothing (an empty piece) again and again. So a
   client that grants no window let every ``send()`` return at once: 100 subscriptions to a
   task with a 1 MiB snapshot put 120-140 MiB in buffers, and no write deadline ever fired.
   Now the app is released only once the buffer holds less than 16 KiB, so ``send()`` waits
   for the client's window as it waits for the socket on HTTP/1.1, and the stream's write
   deadline (``stream_write_timeout``) ends a stream whose client takes nothing. And when the
   app ends a response it had not finished (that deadline, a hang-up), the stream is reset
   (``RST_STREAM CANCEL``) and its buffer emptied at once, instead of being held until the
   client grants a window or leaves.
E. **GOAWAY after ``keep_alive_max_requests`` loses the streams in flight.** Past the cap
   (1,000 streams by default) hypercorn closes the h2 connection at once: it sends GOAWAY and
   can send nothing more, so every request still running on the connection, and those the
   client had already sent, are never answered (grpcio: UNAVAILABLE, "GOAWAY received"; 123
   of 600 calls with a cap of 100). Now the cap drains the connection instead: a GOAWAY
   (``NO_ERROR``) names the last stream taken, the streams up to it are answered, streams the
   client opens after it are refused with ``RST_STREAM REFUSED_STREAM`` (never started, so a
   client may retry them elsewhere; gRPC clients do), and once the last stream has ended the
   connection is closed. ``serve`` lifts the cap for HTTP/2 anyway (one connection is one
   client); this is for hypercorn configured by hand.
F. **Answered streams pile up in the priority tree (trailers).** A stream leaves hypercorn's
   priority tree and its buffer table only when the sender task next visits it. A response
   that ends with trailers (every gRPC call) is finished by the app's own task (the trailers
   carry END_STREAM), and under steady load the sender task did not get round to the finished
   streams: with 64 gRPC calls in flight on one connection the tree grew by one entry per call
   answered (940 after 940 calls), and at 1,000 ``TooManyStreamsError`` ended the connection,
   and on trio the whole server. Now a stream whose trailers have gone out, and whose buffer is
   empty, leaves both tables when it closes; the sender task skips a stream it no longer finds.
"""

from __future__ import annotations

import contextlib
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
    _wait_for_the_window(H2Protocol)
    _drain_after_max_requests(H2Protocol)
    _forget_streams_ended_by_trailers(H2Protocol)


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


# --- D. back-pressure ------------------------------------------------------------------------


def _wait_for_the_window(protocol_class: Any) -> None:
    import h2.errors
    import h2.exceptions
    import priority.priority
    from hypercorn.protocol import h2 as hypercorn_h2
    from hypercorn.protocol.events import StreamClosed

    buffer_class: Any = hypercorn_h2.StreamBuffer
    low_water = hypercorn_h2.BUFFER_LOW_WATER
    stream_send: Callable[[Any, Any], Awaitable[None]] = protocol_class.stream_send

    async def pop(self: Any, max_length: int) -> bytes:
        # hypercorn's, except that what is left decides whether the app may write again, not
        # the size of the piece taken (an empty piece, for want of window, released it).
        length = min(len(self.buffer), max_length)
        data = bytes(self.buffer[:length])
        del self.buffer[:length]
        if len(self.buffer) < low_water:
            await self._paused.set()
        if len(self.buffer) == 0:
            await self._is_empty.set()
        return data

    async def guarded_stream_send(self: Any, event: Any) -> None:
        if isinstance(event, StreamClosed):
            buffer = self.stream_buffers.get(event.stream_id)
            if buffer is not None and not buffer._complete:
                # The app ended without finishing its response (a write deadline, a hang-up):
                # nothing more will come, so the client gets RST_STREAM and the bytes waiting
                # for its window are dropped now. The sender task removes the stream when it
                # next finds it closed (hypercorn's own path for a reset stream).
                await buffer.close()
                # (Already closed or reset by the client: nothing to reset or unblock.)
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    self.connection.reset_stream(event.stream_id,
                                                 error_code=h2.errors.ErrorCodes.CANCEL)
                with contextlib.suppress(priority.priority.PriorityError):
                    self.priority.unblock(event.stream_id)
                await self._flush()
                await self.has_data.set()
        await stream_send(self, event)

    buffer_class.pop = pop
    protocol_class.stream_send = guarded_stream_send


# --- E. the request cap drains the connection --------------------------------------------


def _drain_after_max_requests(protocol_class: Any) -> None:
    import h2.errors
    import h2.events
    import h2.exceptions
    from hypercorn.events import RawData
    from hypercorn.protocol.events import StreamClosed
    from hyperframe.frame import GoAwayFrame

    create_stream: Callable[[Any, Any], Awaitable[None]] = protocol_class._create_stream
    handle_events: Callable[[Any, list[Any]], Awaitable[None]] = protocol_class._handle_events
    stream_send: Callable[[Any, Any], Awaitable[None]] = protocol_class.stream_send

    async def _create_stream(self: Any, request: Any) -> None:
        await create_stream(self, request)
        self._scoped_a2a_taken = getattr(self, "_scoped_a2a_taken", 0) + 1
        self._scoped_a2a_highest = request.stream_id
        # hypercorn compares this count with the cap after each new stream and closes the
        # connection outright; the cap is kept here instead (_handle_events), as a drain.
        self.keep_alive_requests = 0

    async def _handle_events(self: Any, events: list[Any]) -> None:
        last: int | None = getattr(self, "_scoped_a2a_last", None)
        if last is not None:
            kept = []
            for event in events:
                if isinstance(event, h2.events.RequestReceived) and event.stream_id > last:
                    # Opened after our GOAWAY: refused, never started (safe to retry).
                    # (Already closed by the client: nothing to refuse.)
                    with contextlib.suppress(h2.exceptions.ProtocolError):
                        self.connection.reset_stream(
                            event.stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                else:
                    kept.append(event)
            events = kept
        await handle_events(self, events)
        taken = getattr(self, "_scoped_a2a_taken", 0)
        if last is None and taken >= self.config.keep_alive_max_requests and not self.closed:
            last = self._scoped_a2a_last = self._scoped_a2a_highest
            # h2 can only send a GOAWAY that ends the connection at once (it refuses every
            # frame after it), so this one, which lets the streams up to ``last`` finish, is
            # written beside it: what h2 has queued first, then the frame.
            await self._flush()
            goaway = GoAwayFrame(0)
            goaway.last_stream_id = last
            goaway.error_code = h2.errors.ErrorCodes.NO_ERROR
            await self.send(RawData(data=goaway.serialize()))
            await _close_if_drained(self)

    async def _close_if_drained(self: Any) -> None:
        if getattr(self, "_scoped_a2a_last", None) is None or self.closed:
            return
        if all(stream.idle for stream in self.streams.values()):
            # As hypercorn ends a connection it drains for shutdown: the final GOAWAY, and the
            # client closes the socket (not Closed() here: the finished streams' tasks are
            # still returning through the connection's task group).
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.connection.close_connection()
            await self._flush()

    async def drained_stream_send(self: Any, event: Any) -> None:
        await stream_send(self, event)
        if isinstance(event, StreamClosed):
            await _close_if_drained(self)

    protocol_class._create_stream = _create_stream
    protocol_class._handle_events = _handle_events
    protocol_class.stream_send = drained_stream_send


# --- F. streams ended by their trailers leave the priority tree ---------------------------


def _forget_streams_ended_by_trailers(protocol_class: Any) -> None:
    import priority.priority
    from hypercorn.protocol.events import StreamClosed, Trailers

    stream_send: Callable[[Any, Any], Awaitable[None]] = protocol_class.stream_send
    send_data: Callable[[Any, int], Awaitable[None]] = protocol_class._send_data

    async def trailers_aware_stream_send(self: Any, event: Any) -> None:
        await stream_send(self, event)
        if isinstance(event, Trailers):
            # hypercorn sent them with END_STREAM: nothing is left for the sender task to do
            # for this stream but forget it, which it may not get round to (module docstring).
            ended: set[int] = self.__dict__.setdefault("_scoped_a2a_ended", set())
            ended.add(event.stream_id)
        elif isinstance(event, StreamClosed):
            ended = self.__dict__.get("_scoped_a2a_ended", set())
            if event.stream_id in ended:
                ended.discard(event.stream_id)
                buffer = self.stream_buffers.get(event.stream_id)
                if buffer is not None and buffer.complete and not buffer.buffer:
                    del self.stream_buffers[event.stream_id]
                    with contextlib.suppress(priority.priority.PriorityError):
                        self.priority.remove_stream(event.stream_id)

    async def tolerant_send_data(self: Any, stream_id: int) -> None:
        if stream_id not in self.stream_buffers:  # forgotten above since it was picked
            with contextlib.suppress(priority.priority.PriorityError):
                self.priority.remove_stream(stream_id)
            return
        try:
            await send_data(self, stream_id)
        except KeyError:
            # Forgotten above while the sender task waited on it: hypercorn's clean-up of the
            # stream looked it up again. Nothing is left to send for it.
            with contextlib.suppress(priority.priority.PriorityError):
                self.priority.remove_stream(stream_id)

    protocol_class.stream_send = trailers_aware_stream_send
    protocol_class._send_data = tolerant_send_data
