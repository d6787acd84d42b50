"""One client HTTP/2 connection shared by concurrent calls, with no task of its own.

HTTP/2 framing is the ``h2`` package (python-hyper's sans-IO state machine, which hypercorn
already brings); the bytes go over an AnyIO byte stream, so this runs on asyncio and on trio.

**Who reads.** There is no reader task: a call that waits for its stream's next event reads
the socket itself when nobody else is (it takes the reader's role), and hands every frame it
reads to the stream it belongs to, waking that stream's waiter; otherwise it sleeps until it
is woken. A reader whose own wait is over (or who is cancelled) leaves the role and wakes one
other waiter, who takes it on or, satisfied too, passes it along. So the socket is read exactly
while some call waits, always by a task that a call owns: nothing can outlive its caller, on
any backend, whether the client is used with ``async with`` or closed with ``aclose()``.
Frames that arrive while no call waits (a PING, a GOAWAY) wait in the socket for the next one.

**Writing.** h2 queues bytes; :meth:`H2Client.flush` writes them under a lock, shielded from
cancellation and bounded by ``write_timeout``: a write cut short would leave half a frame and
break every call on the connection. A write that does not finish in time breaks it instead.

**Flow control.** Received DATA is acknowledged (WINDOW_UPDATE) as the caller takes it
(:meth:`Stream.read`), so a stream whose reader stops stops the peer once the stream's window
is full; a request body waits for the peer's window, reading as any waiter does; a new stream
waits for the peer's ``MAX_CONCURRENT_STREAMS``.

**Cancellation.** A stream left before it ended (a cancelled call, a stream closed early) is
reset with RST_STREAM CANCEL (shielded, bounded) and the connection stays usable. **Errors.**
A broken connection (closed, reset, a protocol error) raises :class:`ConnectionLost` in every
call on it; after a GOAWAY no new stream is opened, and a stream the peer says it never
processed raises :class:`StreamRefused` (safe to send again on a new connection).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from anyio.streams.tls import TLSAttribute
from h2.errors import ErrorCodes

Headers = Sequence[tuple[bytes, bytes]]

STREAM_WINDOW = 4 << 20
"""Bytes a peer may send on one stream before it waits for us to read (WINDOW_UPDATE)."""
CONNECTION_WINDOW = 16 << 20
"""Bytes in flight on the whole connection, every stream together."""


class ConnectionLost(Exception):
    """The connection broke (or could not be opened); the message says how."""


class StreamRefused(ConnectionLost):
    """The peer did not process the stream (GOAWAY, REFUSED_STREAM): safe to send again."""


def _fresh(error: ConnectionLost) -> ConnectionLost:
    """A new exception like ``error``: one shared instance raised in many tasks would pile
    every task's traceback onto it."""
    return type(error)(str(error))


class _Waiter:
    """A task's wake-up call: set by whoever has news for it, renewed after each wait."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def wake(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = anyio.Event()


class Stream(_Waiter):
    """One request's stream: the response headers, its DATA as it comes, the trailers."""

    __slots__ = ("_chunks", "_conn", "ended", "error", "headers", "id", "reset", "trailers")

    def __init__(self, conn: H2Client, stream_id: int) -> None:
        super().__init__()
        self._conn = conn
        self.id = stream_id
        self.headers: list[tuple[bytes, bytes]] | None = None
        self.trailers: list[tuple[bytes, bytes]] | None = None
        self._chunks: list[tuple[bytes, int]] = []  # (data, flow-controlled length)
        self.ended = False
        self.reset: int | None = None
        """The peer's RST_STREAM error code, if it reset the stream."""
        self.error: ConnectionLost | None = None

    @property
    def done(self) -> bool:
        """Nothing more will arrive (ended, reset, or the connection broke)."""
        return self.ended or self.reset is not None or self.error is not None

    async def response(self) -> list[tuple[bytes, bytes]] | None:
        """The response headers, once they arrive (None if the stream ended without any).
        Raises ConnectionLost / StreamRefused."""
        await self._conn.pump(self, lambda: self.headers is not None or self.done)
        self._raise()
        return self.headers

    async def read(self) -> bytes | None:
        """The next DATA received, acknowledged to the peer as it is taken; None at the end.
        Raises ConnectionLost when the connection broke before the stream ended."""
        await self._conn.pump(self, lambda: bool(self._chunks) or self.done)
        if self._chunks:
            data, flow = self._chunks.pop(0)
            await self._conn.acknowledge(self.id, flow)
            return data
        self._raise()
        return None

    def _raise(self) -> None:
        if self.error is not None and not self.ended:
            raise _fresh(self.error)
        if self.reset == ErrorCodes.REFUSED_STREAM:
            raise StreamRefused("the agent refused the stream (REFUSED_STREAM)")

    def unread(self) -> int:
        """Flow-controlled bytes received and never taken (handed back on release)."""
        return sum(flow for _, flow in self._chunks)


class H2Client:
    """A client HTTP/2 connection (see the module docstring for who reads and writes)."""

    def __init__(self, socket: anyio.abc.ByteStream, *, write_timeout: float = 30.0) -> None:
        self._socket = socket
        self.write_timeout = write_timeout
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        self._h2.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
        })
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - 65_535)
        self._streams: dict[int, Stream] = {}
        self._pumping: dict[_Waiter, None] = {}  # ordered: the oldest waiter reads next
        self._slot_waiters: set[_Waiter] = set()
        self._reading = False
        self._write_lock = anyio.Lock()
        self.broken: ConnectionLost | None = None
        self.going_away = False
        """A GOAWAY came: streams already open may finish; no new one is opened here."""

    @classmethod
    async def connect(cls, host: str, port: int, *, ssl_context: ssl.SSLContext | None,
                      write_timeout: float = 30.0) -> H2Client:
        """Open a connection (TLS when ``ssl_context`` is given: ALPN must pick ``h2``).
        Raises ConnectionLost; cancelled, it leaves nothing open."""
        try:
            socket: anyio.abc.ByteStream
            if ssl_context is None:
                socket = await anyio.connect_tcp(host, port)
            else:
                # Not standard-compatible: a peer that closes without close_notify (most
                # gRPC servers) is an end of stream, not an error; closing skips the wait.
                socket = await anyio.connect_tcp(host, port, ssl_context=ssl_context,
                                                 tls_hostname=host,
                                                 tls_standard_compatible=False)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        try:
            if ssl_context is not None:
                alpn = socket.extra(TLSAttribute.alpn_protocol, None)
                if alpn != "h2":
                    raise ConnectionLost(f"the TLS server did not agree to HTTP/2 (ALPN "
                                         f"{alpn or 'none'}), which gRPC needs")
            conn = cls(socket, write_timeout=write_timeout)
            await conn.flush()
        except BaseException:
            await anyio.aclose_forcefully(socket)
            raise
        return conn

    @property
    def usable(self) -> bool:
        return self.broken is None and not self.going_away

    # --- streams ------------------------------------------------------------------------

    async def open(self, headers: Headers, body: bytes) -> Stream:
        """Send a request (headers, then ``body`` as the peer's windows allow) on a new
        stream. Raises StreamRefused when this connection takes no new stream, and
        ConnectionLost. Cancelled, the stream (if begun) is reset and released."""
        waiter = _Waiter()
        self._slot_waiters.add(waiter)
        try:
            await self.pump(waiter, lambda: not self.usable or self._has_slot())
        finally:
            self._slot_waiters.discard(waiter)
        self._check_usable()
        stream_id = self._h2.get_next_available_stream_id()
        self._h2.send_headers(stream_id, headers, end_stream=not body)
        stream = self._streams[stream_id] = Stream(self, stream_id)
        try:
            await self.flush()
            await self._send_body(stream, body)
        except BaseException:
            await self.release(stream)
            raise
        return stream

    def _has_slot(self) -> bool:
        return self._h2.open_outbound_streams < self._h2.remote_settings.max_concurrent_streams

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise _fresh(self.broken)
        if self.going_away:
            raise StreamRefused("the agent is closing this connection (GOAWAY)")

    async def _send_body(self, stream: Stream, body: bytes) -> None:
        view = memoryview(body)
        at = 0
        while at < len(body):
            window = self._h2.local_flow_control_window(stream.id)
            size = min(window, self._h2.max_outbound_frame_size, len(body) - at)
            if size <= 0:
                await self.pump(stream, lambda: stream.done or self.broken is not None or
                                self._h2.local_flow_control_window(stream.id) > 0)
                if self.broken is not None:
                    raise _fresh(self.broken)
                if stream.done:
                    return  # the peer answered (or reset) before taking it all
                continue
            self._h2.send_data(stream.id, bytes(view[at:at + size]),
                               end_stream=at + size == len(body))
            at += size
            await self.flush()

    async def release(self, stream: Stream) -> None:
        """Forget ``stream``: reset it first (RST_STREAM CANCEL) unless it ended, and hand
        back the window of what it never read. Shielded and bounded: safe on cancellation."""
        if self._streams.pop(stream.id, None) is None:
            return
        with anyio.move_on_after(self.write_timeout, shield=True):
            if not stream.done and self.broken is None:
                try:
                    self._h2.reset_stream(stream.id, ErrorCodes.CANCEL)
                except h2.exceptions.StreamClosedError:
                    pass
                except h2.exceptions.ProtocolError:  # pragma: no cover (a closed connection)
                    pass
            unread = stream.unread()
            if unread and self.broken is None:
                self._h2.acknowledge_received_data(unread, stream.id)
            if self.broken is None:
                with contextlib.suppress(ConnectionLost):
                    await self.flush()
        for waiter in self._slot_waiters:
            waiter.wake()

    async def acknowledge(self, stream_id: int, flow: int) -> None:
        """Hand ``flow`` bytes back to the peer (a WINDOW_UPDATE, once enough are taken)."""
        if self.broken is None and flow:
            self._h2.acknowledge_received_data(flow, stream_id)
            await self.flush()

    # --- reading ------------------------------------------------------------------------

    async def pump(self, waiter: _Waiter, ready: Callable[[], bool]) -> None:
        """Return once ``ready()``, reading the socket meanwhile if nobody else is.

        Returns too when the connection broke (``ready`` is then for the caller to judge,
        the stream's ``error`` is set). Cancellation: leaves at once, handing the reading
        role to another waiter.
        """
        self._pumping[waiter] = None
        try:
            while not ready() and self.broken is None:
                if self._reading:
                    await waiter.wait()
                    continue
                self._reading = True
                try:
                    while not ready() and self.broken is None:
                        await self._read_once()
                finally:
                    self._reading = False
        finally:
            del self._pumping[waiter]
            if not self._reading and self._pumping:
                next(iter(self._pumping)).wake()  # somebody else still waits: read for it

    async def _read_once(self) -> None:
        try:
            data = await self._socket.receive(1 << 16)
        except anyio.EndOfStream:
            await self._break(ConnectionLost("the agent closed the connection"))
            return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError,
                ssl.SSLError) as exc:
            await self._break(ConnectionLost(f"the connection broke: {type(exc).__name__}: "
                                             f"{exc}"))
            return
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            await self._break(ConnectionLost(f"the agent broke the HTTP/2 protocol: {exc}"))
            return
        for event in events:
            self._dispatch(event)
        await self.flush()  # SETTINGS and PING acknowledgements, resets h2 decided on

    def _dispatch(self, event: Any) -> None:
        stream = self._streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and stream is not None:
            stream.headers = list(event.headers or ())
        elif isinstance(event, h2.events.DataReceived):
            if stream is not None:
                stream._chunks.append((event.data or b"", event.flow_controlled_length or 0))
            elif event.flow_controlled_length and event.stream_id:
                # A stream already released: its bytes still count against the connection.
                self._h2.acknowledge_received_data(event.flow_controlled_length,
                                                   event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived) and stream is not None:
            stream.trailers = list(event.headers or ())
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            stream.ended = True
            self._wake_slots()
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            stream.reset = int(event.error_code or 0)
            self._wake_slots()
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            if stream is None:  # the connection's window or settings: any sender may go on
                for other in list(self._streams.values()):
                    other.wake()
                self._wake_slots()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.going_away = True
            last = event.last_stream_id if event.last_stream_id is not None else 0
            for other in list(self._streams.values()):
                if other.id > last and not other.done:
                    other.error = StreamRefused(
                        "the agent closed the connection before taking this call (GOAWAY)")
                    other.wake()
            self._wake_slots()
        if stream is not None:
            stream.wake()

    def _wake_slots(self) -> None:
        for waiter in self._slot_waiters:
            waiter.wake()

    async def _break(self, error: ConnectionLost) -> None:
        if self.broken is None:
            self.broken = error
        for stream in self._streams.values():
            if stream.error is None:
                stream.error = error
        for waiter in [*self._pumping, *self._slot_waiters, *self._streams.values()]:
            waiter.wake()
        with anyio.CancelScope(shield=True):
            await anyio.aclose_forcefully(self._socket)

    # --- writing ------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write what h2 has queued (shielded, bounded). Raises ConnectionLost if broken."""
        async with self._write_lock:
            data = self._h2.data_to_send()
            if data and self.broken is None:
                failure: ConnectionLost | None = None
                with anyio.move_on_after(self.write_timeout, shield=True) as scope:
                    try:
                        await self._socket.send(data)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError,
                            ssl.SSLError) as exc:
                        failure = ConnectionLost(f"the connection broke: {exc!r}")
                if scope.cancelled_caught:
                    failure = ConnectionLost(
                        f"a write to the agent did not finish in {self.write_timeout:g} s")
                if failure is not None:
                    await self._break(failure)
        if self.broken is not None:
            raise _fresh(self.broken)

    async def aclose(self) -> None:
        """Close the connection: every call still on it fails with ConnectionLost."""
        await self._break(ConnectionLost("the client was closed"))


__all__ = ["ConnectionLost", "H2Client", "Stream", "StreamRefused"]
