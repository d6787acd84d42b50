"""Work-arounds for hypercorn's connection handling: the one place that patches hypercorn.

Each fix is checked against the hypercorn versions it was written for (``TESTED``); on any other
version nothing is patched and a warning says so, because these reach into private methods.

1. **A closed idle connection is held until the keep-alive timeout.** When a client closes an
   idle keep-alive connection (or connects and closes without a request), hypercorn's TCP server
   reads EOF and ends its read loop, but the connection's task group still waits for the idle
   timer (``keep_alive_timeout``), and only then closes the socket. So every such connection
   holds a file descriptor (CLOSE_WAIT) for the whole timeout, on both workers; a client that
   opens and closes connections in a loop exhausts the server's descriptors. The fix: once the
   read loop has seen the end of input, an idle connection is closed at once, and an idle timer
   started later (a response finishing after the client half-closed) closes at once too.
2. **fd exhaustion floods the log** (one traceback per accept retry): throttled, in
   :mod:`.hypercorn_noise`.
3. **HTTP/2 is off unless asked for** (``serve(http2=True)``): hypercorn switches a plain
   connection to HTTP/2 when it opens with the h2c preface or asks for an ``Upgrade: h2c``, and
   its HTTP/2 layer (0.18) has bugs that only patches of its private code work around
   (:mod:`.hypercorn_h2`, docs/connections.md). With
   HTTP/2 off, a prior-knowledge client's connection is closed at once, and an upgrade request is
   answered over HTTP/1.1 as if it had not asked. With HTTP/2 on, a prior-knowledge
   connection that opens no stream has the idle timer an HTTP/1.1 one has: hypercorn stopped
   it on the preface, and a client that sent only the preface held its connection for ever.
4. **With HTTP/2 on, hostile or unlucky frames reach bugs in hypercorn's H2 protocol**: a
   DATA frame for a stream already answered (``KeyError``), PRIORITY frames for streams never
   opened (``TooManyStreamsError`` ends a trio server), streams opened and reset at once
   (rapid reset, CVE-2023-44487). Those patches live in :mod:`.hypercorn_h2`.
5. **The asyncio worker's noise about connections that are already gone** (an ``OSError``
   out of its close, hypercorn #361; 3.11's traceback for a connection it cancelled on
   purpose): exactly those records dropped, in :mod:`.hypercorn_noise`.
6. **The asyncio worker writes on to a connection already gone.** Once the transport has
   failed (the client reset it, the kernel aborted it), every later write is dropped by
   asyncio with a "socket.send() raised exception" warning from the sixth on, and hypercorn
   keeps handing it the app's writes until the app notices the hang-up. A stream writing a
   1 MiB event in 8 KiB slices logged one warning per slice (20,800 lines for 200
   subscribers that hung up mid-event). Now a write to a closing transport is not made; the
   connection is treated as closed, as hypercorn does when a write fails. (A half-closed
   client is not affected: its transport stays open for our answer.) And an HTTP/2 stream
   that ends while its connection is being cancelled at shutdown (a client that stopped
   reading, cut off) no longer ends the process with status 1: hypercorn restarted the idle
   timer in the cancelling task group, and asyncio's refusal escaped
   (``tests/test_shutdown_process.py``, on Python 3.11).
7. **trio: two tasks writing one socket** (``BusyResourceError``). hypercorn's trio worker
   serialises its writes with a lock, but its connection close (``TCPServer._close``, run by
   whichever task closes: the read loop after a client's malformed bytes, or the app's task
   after a ``Connection: close`` answer) sends EOF without it. Seen on the 413 "too many
   pieces" path: the app's task writing the end of its answer while the read loop, having
   met the client's next (malformed) chunk, closed the connection; the app's ``send()``
   raised ``BusyResourceError``. Now the close sends EOF only under the write lock, and when a
   write holds it (perhaps stuck on a client that stopped reading) closes the socket without
   EOF, which ends that write as hypercorn's own close always did.
8. **A head trickled a byte at a time held its connection for the whole keep-alive timeout**
   (75 s): a deadline on an HTTP/1.1 request's head (:mod:`.header_deadline`).
9. **h11 serves heads a server behind a proxy must refuse**: both Content-Length and
   Transfer-Encoding (request smuggling), Transfer-Encoding in HTTP/1.0, and any version in
   the request line (``HTTP/9.9``). Now 400 (or 505) with the reason, and the connection
   closed (:mod:`.http1_framing`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import hypercorn

from . import header_deadline, http1_framing, hypercorn_h2, hypercorn_noise

log = logging.getLogger("scoped_a2a.hypercorn_fixes")

TESTED = ("0.17.", "0.18.")
"""hypercorn versions (prefixes) whose private methods these fixes were written against."""

HTTP2_FLAG = "scoped_a2a_http2"
"""The attribute of hypercorn's ``Config`` that allows HTTP/2 (absent: allowed, as hypercorn)."""

_installed = False


def version() -> str:
    return str(getattr(hypercorn, "__version__", "") or _dist_version())


def _dist_version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("hypercorn")
    except PackageNotFoundError:  # pragma: no cover - hypercorn is a dependency
        return ""


def install() -> bool:
    """Apply the fixes once per process; returns whether hypercorn is a version they fit.

    Idempotent and cheap: ``serve`` calls it every time. Raises nothing.
    """
    global _installed
    if _installed:
        return True
    found = version()
    if not found.startswith(TESTED):
        log.warning("hypercorn %s is not a version scoped-a2a's connection fixes were tested "
                    "with (%s); closed keep-alive connections may be held until their "
                    "timeout and HTTP/2 cannot be switched off", found or "?", ", ".join(TESTED))
        return False
    import hypercorn.asyncio.tcp_server as asyncio_tcp
    import hypercorn.protocol as protocol
    import hypercorn.trio.tcp_server as trio_tcp
    from hypercorn.protocol.h11 import H11Protocol

    _patch_eof(asyncio_tcp.TCPServer)
    _patch_eof(trio_tcp.TCPServer)
    _patch_http2(protocol.ProtocolWrapper)
    header_deadline.patch(protocol.ProtocolWrapper, _shielded)  # (slow heads: its module)
    http1_framing.install(H11Protocol)  # (smuggling-prone heads: its module)
    hypercorn_noise.install()
    hypercorn_h2.install()
    _skip_writes_to_closing_transports(asyncio_tcp.TCPServer)
    _close_under_the_write_lock(trio_tcp.TCPServer)
    _installed = True
    return True


# --- 1. a client's EOF closes an idle connection -----------------------------------------


def _patch_eof(server_class: Any) -> None:
    read_data: Callable[[Any], Awaitable[None]] = server_class._read_data
    idle_timeout: Callable[[Any], Awaitable[None]] = server_class._idle_timeout

    async def _read_data(self: Any) -> None:
        try:
            await read_data(self)
        finally:
            # The client sent EOF (or the read failed): no more requests can come. If the
            # connection is idle (its idle timer runs only between requests), close it now
            # instead of when the timer fires. A request in flight still gets its answer:
            # hypercorn closes the connection after it (or the idle timer below does).
            self._scoped_a2a_eof = True
            # Under the timer's lock: a restart in progress (a response just finished) may
            # have checked the flag before it was set and not yet recorded its task.
            async with self.idle_task._lock:
                idle = self.idle_task._handle is not None
            if idle:
                await self.idle_task.restart(self._task_group, self._idle_timeout)

    async def _idle_timeout(self: Any) -> None:
        if getattr(self, "_scoped_a2a_eof", False):
            # Same as hypercorn's own timer after its wait, without the wait. Shielded by
            # the worker's own means, as there (a cancel must not leave the socket open).
            await _shielded(self._initiate_server_close)
            return
        await idle_timeout(self)

    server_class._read_data = _read_data
    server_class._idle_timeout = _idle_timeout


async def _shielded(close: Callable[[], Awaitable[None]]) -> None:
    import sniffio

    if sniffio.current_async_library() == "trio":
        import trio

        with trio.CancelScope(shield=True):
            await close()
    else:
        import asyncio

        await asyncio.shield(close())


# --- 3. HTTP/2 only when allowed -----------------------------------------------------------


def _patch_http2(wrapper_class: Any) -> None:
    from hypercorn.events import Closed
    from hypercorn.protocol.h2 import H2Protocol
    from hypercorn.protocol.h11 import H2ProtocolAssumedError, H11Protocol

    handle: Callable[[Any, Any], Awaitable[None]] = wrapper_class.handle
    check_protocol: Callable[[Any, Any], Awaitable[None]] = H11Protocol._check_protocol

    async def _check_protocol(self: Any, event: Any) -> None:
        if getattr(self.config, HTTP2_FLAG, True):
            await check_protocol(self, event)
        elif event.method == b"PRI" and event.target == b"*" and event.http_version == b"2.0":
            raise H2ProtocolAssumedError(b"")
        # else: an "Upgrade: h2c" request is served over HTTP/1.1 (no 101 is sent)

    async def guarded_handle(self: Any, event: Any) -> None:
        if getattr(self.config, HTTP2_FLAG, True):
            was_h11 = isinstance(self.protocol, H11Protocol)
            await handle(self, event)
            if was_h11 and isinstance(self.protocol, H2Protocol) and self.protocol.idle:
                # A prior-knowledge connection, switched to HTTP/2 with no stream open:
                # hypercorn stopped the idle timer on its preface (parsed as an HTTP/1.1
                # request) and only a stream's end restarts it. Without this, a client that
                # sent the preface and nothing else held its connection for ever.
                server: Any = getattr(self.send, "__self__", None)  # the worker's TCPServer
                if server is not None:
                    await server.idle_task.restart(server._task_group, server._idle_timeout)
            return
        try:
            await self.protocol.handle(event)
        except H2ProtocolAssumedError:
            # An HTTP/2 prior-knowledge preface on a server without HTTP/2: the client cannot
            # read an HTTP/1.1 answer, so close the connection (it sees EOF at once).
            await self.send(Closed())

    wrapper_class.handle = guarded_handle
    H11Protocol._check_protocol = _check_protocol  # type: ignore[method-assign]


# --- 6. asyncio: no writes to a transport already gone -----------------------------------


def _skip_writes_to_closing_transports(server_class: Any) -> None:
    from hypercorn.events import Closed, RawData, Updated

    protocol_send: Callable[[Any, Any], Awaitable[None]] = server_class.protocol_send

    async def guarded_protocol_send(self: Any, event: Any) -> None:
        if isinstance(event, RawData) and self.writer.is_closing():
            # The transport failed or was closed: asyncio would drop the bytes (and log).
            # What hypercorn does when a write fails: the protocol learns the connection is
            # gone, which ends its streams and tells the app (http.disconnect).
            await self.protocol.handle(Closed())
            return
        if isinstance(event, Updated):
            try:
                await protocol_send(self, event)
            except RuntimeError as exc:
                # An HTTP/2 stream that ends while its connection's task group is being
                # cancelled (a shutdown cutting off a client that stopped reading) restarts
                # the idle timer in that group, and asyncio refuses a new task there: the
                # error escaped hypercorn and ended the process with status 1 and a
                # traceback. The connection is ending: there is no idle time left to watch.
                if "TaskGroup" not in str(exc):
                    raise
            return
        await protocol_send(self, event)

    server_class.protocol_send = guarded_protocol_send


# --- 7. trio: the EOF of a close is a write too ------------------------------------------


def _close_under_the_write_lock(server_class: Any) -> None:
    close: Callable[[Any], Awaitable[None]] = server_class._close

    async def _close(self: Any) -> None:
        import trio

        lock = self.send_lock
        try:
            if lock.statistics().owner is trio.lowlevel.current_task():
                raise trio.WouldBlock  # a failed write of this task's is closing
            lock.acquire_nowait()
        except trio.WouldBlock:
            # A write is in progress (maybe stuck on a client that stopped reading): no EOF
            # now. Closing the socket wakes that write with ClosedResourceError, which
            # hypercorn's write path takes for a closed connection.
            await self.stream.aclose()
            return
        try:
            await close(self)
        finally:
            lock.release()

    server_class._close = _close
