"""Server-sent events: the writer of one stream response.

Headers go out with the first write (or at once, :meth:`SSEWriter.start`), so a handler that
fails before streaming anything still answers with an ordinary JSON-RPC error. Every event
carries ``id:`` = its position in the task's log, so a client that reconnects with
``Last-Event-ID`` resumes where it left off.

Memory: an event is written as a small per-stream prefix (``id:``, the JSON-RPC envelope with
this request's id), the SHARED encoded body (:class:`~scoped_a2a.protocol.dialect.Frame`, one
copy for every subscriber) and a small suffix. A small event goes out in one ``send``; a big one
in slices of at most :data:`SLICE` bytes, so a server worker stuck on a client that stopped
reading holds one slice for it, never a full-size copy (h11 joins each chunk's framing into a new
bytes object, which for a 1 MiB snapshot was 1 MiB per stuck client).

Clients that stop reading: the stream has ONE write deadline (:meth:`SSEWriter.write_deadline`),
armed while a write is in progress and disarmed when it completes, rather than a new
``fail_after`` per write. The same scope times the keep-alives: while the stream waits for the
next event, its deadline is when a keep-alive falls due (:meth:`SSEWriter.rest`); reaching it ends
the block quietly, and the caller writes the keep-alive and enters a new block. So a waiting stream
holds one scope and a wake-up creates none (a scope per wait cost a third of a fan-out's CPU
per delivered event on asyncio).

Where the server's write can be interrupted (hypercorn's asyncio worker, uvicorn) the deadline
ends the stream with :class:`SlowConsumer` after ``write_timeout`` without progress.
hypercorn's trio worker shields its socket writes, so no deadline in the app can interrupt them;
there the kernel does it (``TCP_USER_TIMEOUT`` set by :func:`~scoped_a2a.server.serve.serve`):
the connection is aborted, hypercorn delivers ``http.disconnect`` and the stream is cancelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import TracebackType

import anyio

from ..protocol.dialect import Frame
from .asgi import Send

SLICE = 8 << 10
"""The most bytes of a big event handed to the server in one ``send``."""

_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class SlowConsumer(Exception):
    """The client took no bytes within the write timeout; its stream is closed."""


class _KeepaliveDue(Exception):
    """The rest deadline passed before the stream's next write began (ends the block)."""


class SSEWriter:
    """Writes one SSE response. Not safe for concurrent use: one task writes a stream."""

    def __init__(self, send: Send, *, write_timeout: float = 30.0) -> None:
        self._send = send
        self._write_timeout = write_timeout
        self._deadline: anyio.CancelScope | None = None
        self._resting = False  # the deadline is the keep-alive's (set by rest(), not a write)
        self.started = False
        self.events_sent = 0
        self.last_write = -math.inf
        """``anyio.current_time()`` when the server last accepted bytes of this stream."""

    def write_deadline(self) -> _WriteDeadline:
        """Bound every write made inside this block by ``write_timeout`` (one scope, re-armed).

        On expiry the block is cancelled and :class:`SlowConsumer` is raised. A write the server
        shields from cancellation is not interrupted; the block ends once it returns (see the
        module docstring). When a deadline set by :meth:`rest` passes instead, the block ends
        quietly (the code after it writes the keep-alive). Cancellation from outside (a hang-up)
        passes through unchanged. Blocks nest: the outer one bounds writes again after.
        """
        return _WriteDeadline(self)

    def rest(self, seconds: float) -> None:
        """Let the current :meth:`write_deadline` block end quietly once the stream has written
        nothing for ``seconds`` (from its last write); the next write disarms it.

        Arm it right before waiting for the next event: then it can only pass while the stream
        waits, or before the first write after the wait (which then writes nothing and ends the
        block instead), never between the writes of one event. Synchronous (no checkpoint).
        """
        deadline = self._deadline
        assert deadline is not None, "rest() is for use inside write_deadline()"
        self._resting = True
        at = self.last_write + seconds
        if deadline.deadline != at:  # re-arming at the same time would cost a timer for nothing
            deadline.deadline = at

    async def start(self) -> None:
        """Send the response headers now (a stream with nothing to send yet says it is open)."""
        if not self.started:
            self.started = True
            await self._send({"type": "http.response.start", "status": 200,
                              "headers": _HEADERS})
            self.last_write = anyio.current_time()

    async def _write(self, chunk: bytes) -> None:
        deadline = self._deadline
        if deadline is None:
            # Outside write_deadline() (an error event after the method gave up): a deadline
            # of its own for this one write.
            with anyio.move_on_after(self._write_timeout) as alone:
                self._deadline = alone
                try:
                    await self._write(chunk)
                finally:
                    self._deadline = None
            if alone.cancelled_caught:
                raise SlowConsumer
            return
        if self._resting:
            if deadline.cancel_called:
                raise _KeepaliveDue  # nothing of this wake-up written yet: the caller re-reads
            self._resting = False
        deadline.deadline = anyio.current_time() + self._write_timeout
        try:
            if not self.started:
                await self.start()
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
        except OSError as exc:
            # hypercorn's asyncio worker can hand a connection's failure (ETIMEDOUT after the
            # kernel aborted a client that stopped reading) to the app's send() (hypercorn #361).
            raise SlowConsumer(f"the connection failed: {exc}") from None
        self.last_write = anyio.current_time()
        deadline.deadline = math.inf

    async def event(self, data: bytes, event_id: int | None = None) -> None:
        """Send one event; ``data`` is one complete JSON-RPC response (no newlines)."""
        if event_id is None:
            await self._write(b"data: " + data + b"\n\n")
        else:
            await self._write(b"id: " + str(event_id).encode() + b"\ndata: " + data + b"\n\n")
        self.events_sent += 1

    async def result(self, frame: Frame, event_id: int, *, before: bytes = b"",
                     after: bytes = b"") -> None:
        """Send one event whose data is ``before + frame + after``.

        ``before``/``after`` wrap the frame for the binding (JSON-RPC: the envelope with this
        request's id, ``{"jsonrpc":..,"result":`` and ``}``; HTTP+JSON: nothing). The frame's
        shared body is never copied whole: small events go out in one ``send``, big ones in
        slices of at most :data:`SLICE` bytes. Cancelled midway, the client has a partial
        event, which SSE discards (an event counts only once its blank line arrives).
        """
        prefix = b"id: " + str(event_id).encode() + b"\ndata: " + before + frame.head
        suffix = frame.tail + after + b"\n\n"
        body = frame.body
        if len(body) <= SLICE:
            await self._write(b"".join((prefix, body, suffix)))
        else:
            view = memoryview(body)
            await self._write(prefix + view[:SLICE])
            at = SLICE
            while len(body) - at > SLICE:
                await self._write(bytes(view[at : at + SLICE]))
                at += SLICE
            await self._write(view[at:].tobytes() + suffix)
        self.events_sent += 1

    async def results(self, frames: Sequence[tuple[Frame, int]], *, before: bytes = b"",
                      after: bytes = b"") -> None:
        """Send several events (each as :meth:`result` would) in as few writes as possible.

        A reader that wakes to find k new events in the log writes them together: one
        ``send`` for up to :data:`SLICE` bytes of small events, instead of k. This is what keeps
        a large fan-out on hypercorn's trio worker from falling behind, where each ``send`` is
        a socket write of its own (docs/benchmarks.md). A big event still goes out sliced, on
        its own. Cancelled midway, the client has whole events up to the last blank line sent
        and SSE discards the partial one; the ids tell a reconnecting client where to resume.
        """
        batch: list[bytes] = []
        size = 0
        for frame, event_id in frames:
            body = frame.body
            if len(body) > SLICE:
                await self._write_batch(batch)
                batch, size = [], 0
                await self.result(frame, event_id, before=before, after=after)
                continue
            prefix = b"id: " + str(event_id).encode() + b"\ndata: " + before + frame.head
            suffix = frame.tail + after + b"\n\n"
            grown = size + len(prefix) + len(body) + len(suffix)
            if batch and grown > SLICE:
                await self._write_batch(batch)
                batch, grown = [], grown - size
            batch += (prefix, body, suffix)
            size = grown
        await self._write_batch(batch)

    async def _write_batch(self, pieces: list[bytes]) -> None:
        """Write whole events given as (prefix, body, suffix) triples, in one ``send``."""
        if pieces:
            await self._write(b"".join(pieces))
            self.events_sent += len(pieces) // 3

    async def keepalive(self) -> None:
        """A comment line, so proxies and clients see an idle stream is alive."""
        await self._write(b": keep-alive\n\n")

    async def close(self) -> None:
        """End the response body (headers first, if nothing was sent)."""
        if not self.started:
            self.started = True
            await self._send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


class _WriteDeadline:
    """The block of :meth:`SSEWriter.write_deadline`.

    A class, not a ``@contextmanager`` generator: on Python 3.12+ an exception raised out of
    such a generator (SlowConsumer, here) leaves its frames, and the stream's frame, in a
    reference cycle for the collector (31 objects a slow consumer on asyncio, 54 on trio, 3.13;
    scoped_a2a/timeouts.py).
    """

    __slots__ = ("_outer", "_scope", "_writer")

    def __init__(self, writer: SSEWriter) -> None:
        self._writer = writer
        self._outer: anyio.CancelScope | None = None
        self._scope = anyio.CancelScope()

    def __enter__(self) -> None:
        writer = self._writer
        self._outer = writer._deadline
        self._scope.__enter__()
        writer._deadline, writer._resting = self._scope, False

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> bool:
        writer = self._writer
        # However the block ends, what follows (an error event, a keep-alive) writes under the
        # outer deadline, not resting.
        rested, writer._resting, writer._deadline = writer._resting, False, self._outer
        keepalive = exc_type is not None and issubclass(exc_type, _KeepaliveDue)
        scope = self._scope
        if keepalive:  # the rest deadline ended the block before a write: quietly
            scope.__exit__(None, None, None)
        else:
            swallowed = scope.__exit__(exc_type, exc_val, exc_tb)
            if not (swallowed and scope.cancelled_caught):
                return bool(swallowed) if exc_type is not None else False
        if scope.cancelled_caught and not rested:
            # Raised with no local naming it (the traceback holds this frame).
            raise SlowConsumer from None
        return True
