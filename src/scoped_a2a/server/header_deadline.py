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
per read. HTTP/2 is left alone (its frames between requests are not a head). The deadline's
wait ends early on server shutdown, which closes the connection as hypercorn's idle timer
would.
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
    from hypercorn.protocol.h11 import H11Protocol

    handle: Callable[[Any, Any], Awaitable[None]] = wrapper_class.handle
    idle = h11.IDLE

    async def timed_handle(self: Any, event: Any) -> None:
        await handle(self, event)
        if type(event) is not RawData:
            return
        protocol = self.protocol
        if not isinstance(protocol, H11Protocol):
            return
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
        server: Any = getattr(self.send, "__self__", None)  # the worker's TCPServer
        idle_task = getattr(server, "idle_task", None)
        if idle_task is None:
            return
        setattr(self, _STARTED, head)
        # Replaces the idle timer running now; hypercorn stops it once the head is parsed.
        await idle_task.restart(server._task_group,
                                partial(_deadline, server, seconds, closing))

    wrapper_class.handle = timed_handle


async def _deadline(server: Any, seconds: float,
                    closing: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]) -> None:
    """The head's deadline on ``server`` (a hypercorn TCPServer): on expiry the 408 (bounded
    by :data:`ANSWER_SECONDS`), then the connection is closed as hypercorn's idle timer closes
    it; on server shutdown, closed at once. Cancelled (the head arrived; the connection
    closed), it does nothing."""
    from hypercorn.events import RawData

    with anyio.move_on_after(seconds):
        await server.context.terminated.wait()
    if not server.context.terminated.is_set():
        with anyio.move_on_after(ANSWER_SECONDS):
            await server.protocol_send(RawData(TIMEOUT_ANSWER))
    await closing(server._initiate_server_close)


__all__ = ["ATTR", "HEADER_TIMEOUT", "TIMEOUT_ANSWER", "configure", "patch"]
