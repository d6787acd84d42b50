"""A deadline on an HTTP/1.1 request's head: once its first bytes have arrived, the whole head
(request line and headers) must arrive within ``header_timeout`` seconds, or the connection
gets ``408 Request Timeout`` and is closed.

Why: hypercorn's only timer on a connection waiting for a request is its idle timer
(``keep_alive_timeout``, 75 s here so that clients' pools close idle connections first,
server/serve.py), and bytes of a head that is not complete yet do not reset or shorten it. So a
client trickling a head (measured: one byte a second) held its connection, and a connection
task, for the whole 75 s, and many such clients hold many (slowloris). The body has its own
deadline (``body_timeout``, server/body.py); this bounds what comes before it.

How: hypercorn's ``ProtocolWrapper.handle`` is wrapped. After it handled bytes on an HTTP/1.1
connection that leave a head incomplete (h11 still waits for the request: both sides IDLE,
and holds bytes of it), the connection's idle timer, which is running then, is restarted as
this deadline (a connection's idle task is one at a time, so the deadline replaces the 75 s
wait, and hypercorn's own ``Updated(idle=False)`` stops it once the head is parsed). A head
that arrives in one read, the usual case, starts nothing: the cost is a few attribute reads
per read. The deadline's wait ends early on server shutdown, which closes the connection as
hypercorn's idle timer would.

HTTP/2 (``serve --http2``), per connection. hypercorn's idle timer runs while a connection has
no request in progress, and neither a frame that arrives a byte at a time nor a HEADERS frame
whose CONTINUATION frames trickle resets or ends it: measured, such a connection was held for
the whole 75 s (a trickled header block ended sooner only at h2's cap of 64 CONTINUATION
frames). Now, after a read that leaves such a connection with part of a frame, or a header
block without its end, buffered in h2, the idle timer is restarted as this deadline; on expiry
the client is sent GOAWAY and the connection closed. A request whose HEADERS complete stops it
(hypercorn's ``Updated(idle=False)``); a frame that completes without starting one (a PING, a
SETTINGS) gives the connection its idle timer back. While requests are in progress the
connection is theirs and no deadline starts: an unfinished header block then blocks only that
client's own connection (h2 refuses every other frame meanwhile), holds at most 64 frames
(1 MiB), and ends with the requests (their own deadlines: body, stream writes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio

HEADER_TIMEOUT = 20.0
"""The default deadline (``serve(header_timeout=)``, ``serve --header-timeout``): a slow link
sends a head of a few KiB in well under a second; this is for a client that stalls."""

ATTR = "_scoped_a2a_header_timeout"
"""The hypercorn ``Config`` attribute that holds the deadline (seconds; None: none)."""

TIMEOUT_ANSWER = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                  b"content-length: 56\r\nconnection: close\r\n\r\n"
                  b"the request's headers did not arrive within the deadline")
"""What a client whose head did not arrive in time is told before the connection closes."""

ANSWER_SECONDS = 1.0
"""At most this long for the 408 to be written (the client may not be reading)."""

_STARTED = "_scoped_a2a_head_deadline"  # on the ProtocolWrapper: the head whose deadline runs


def configure(config: Any, seconds: float | None) -> None:
    """Give hypercorn ``config`` the deadline (None or 0: none)."""
    setattr(config, ATTR, seconds or None)


def patch(wrapper_class: Any, closing: Callable[[Callable[[], Awaitable[None]]],
                                                Awaitable[None]]) -> None:
    """Wrap ``hypercorn.protocol.ProtocolWrapper.handle`` (once per process, from
    hypercorn_fixes.install); ``closing`` runs a connection's close shielded on either
    worker."""
    import h11
    from hypercorn.events import RawData
    from hypercorn.protocol.h2 import H2Protocol
    from hypercorn.protocol.h11 import H11Protocol

    handle: Callable[[Any, Any], Awaitable[None]] = wrapper_class.handle
    idle = h11.IDLE

    async def timed_handle(self: Any, event: Any) -> None:
        await handle(self, event)
        if type(event) is not RawData:
            return
        protocol = self.protocol
        if isinstance(protocol, H11Protocol):
            await _h11_checked(self, protocol, event)
        elif isinstance(protocol, H2Protocol):
            await _h2_checked(self, protocol)

    async def _h11_checked(self: Any, protocol: Any, event: Any) -> None:
        conn = protocol.connection
        if conn.their_state is not idle or conn.our_state is not idle:
            return  # a head was parsed (or an answer is under way)
        seconds = getattr(self.config, ATTR, None)
        # Which head this is: the count of heads parsed before it. Not a flag reset when a
        # head is parsed: the end of one head and the start of the next can come in one read
        # (and be answered within it), so this check may never see the connection between
        # them, and the next head would have had no deadline but the 75 s idle timer.
        head = protocol.keep_alive_requests
        if seconds is None or not event.data or getattr(self, _STARTED, -1) == head:
            return
        if not conn.trailing_data[0]:
            # No bytes of a next head: these bytes ended a request that was answered before
            # handle returned (one offering an upgrade or a CONNECT: h11 pauses until the
            # answer). The connection is idle: its 75 s timer runs, not a head's deadline.
            return
        await _start(self, head, seconds, lambda: TIMEOUT_ANSWER, closing)

    async def _h2_checked(self: Any, protocol: Any) -> None:
        seconds = getattr(self.config, ATTR, None)
        if seconds is None or not protocol.idle:
            return  # no deadline; or requests in progress: the connection is theirs
        frames = protocol.connection.incoming_buffer
        # A frame of which only part has arrived, or a header block still waiting for its
        # CONTINUATION frames (h2 then refuses any other frame on the connection).
        unfinished = bool(frames._data) or bool(frames._headers_buffer)
        # Which head: the highest stream the client has opened (h2 counts a stream once its
        # header block is whole). Not hypercorn's request count: hypercorn_h2 keeps that at 0.
        head = protocol.connection.highest_inbound_stream_id
        started = getattr(self, _STARTED, -1) == head
        if unfinished and not started:
            await _start(self, head, seconds, partial(_goaway, protocol.connection), closing)
        elif started and not unfinished:
            # What was unfinished ended without starting a request (a PING, a SETTINGS,
            # trickled): the connection is idle again, with hypercorn's idle timer.
            server: Any = getattr(self.send, "__self__", None)
            setattr(self, _STARTED, -1)
            await server.idle_task.restart(server._task_group, server._idle_timeout)

    wrapper_class.handle = timed_handle


async def _start(wrapper: Any, head: int, seconds: float, farewell: Callable[[], bytes],
                 closing: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]) -> None:
    """Start ``head``'s deadline on ``wrapper``'s connection, in place of its idle timer."""
    server: Any = getattr(wrapper.send, "__self__", None)  # the worker's TCPServer
    idle_task = getattr(server, "idle_task", None)
    if idle_task is None:
        return
    setattr(wrapper, _STARTED, head)
    # Replaces the idle timer running now; hypercorn stops it once the head is parsed.
    await idle_task.restart(server._task_group,
                            partial(_deadline, server, seconds, closing, farewell))


def _goaway(connection: Any) -> bytes:
    """An HTTP/2 connection's last words: GOAWAY, saying why."""
    connection.close_connection(additional_data=b"the request's headers did not arrive "
                                                b"within the deadline")
    return bytes(connection.data_to_send())


async def _deadline(server: Any, seconds: float,
                    closing: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]],
                    farewell: Callable[[], bytes]) -> None:
    """The head's deadline on ``server`` (a hypercorn TCPServer): on expiry ``farewell()``
    (HTTP/1.1's 408, HTTP/2's GOAWAY; its write bounded by :data:`ANSWER_SECONDS`), then the
    connection is closed as hypercorn's idle timer closes it; on server shutdown, closed at
    once. Cancelled (the head arrived; the connection closed), it does nothing."""
    from hypercorn.events import RawData

    with anyio.move_on_after(seconds):
        await server.context.terminated.wait()
    if not server.context.terminated.is_set():
        with anyio.move_on_after(ANSWER_SECONDS):
            await server.protocol_send(RawData(farewell()))
    await closing(server._initiate_server_close)


__all__ = ["ATTR", "HEADER_TIMEOUT", "TIMEOUT_ANSWER", "configure", "patch"]
