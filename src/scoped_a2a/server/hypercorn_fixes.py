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
2. **fd exhaustion floods the log.** When ``accept()`` fails for lack of descriptors, trio's
   ``serve_listeners`` logs a traceback every 0.1 s. asyncio's selector loop (CPython 3.11 to
   3.13) does not stop its accept loop at the error: it tries ``backlog`` (hypercorn: 100) more
   accepts, logging each and scheduling a retry for each, so it logs ~100 tracebacks a second
   and, when the server closes, each pending retry fails on the closed socket with another
   traceback. A filter keeps one record per ``ACCEPT_LOG_INTERVAL`` seconds per logger, saying
   how many it dropped, and a retry for a listening socket that has been closed does nothing.
3. **HTTP/2 is off unless asked for** (``serve(http2=True)``): hypercorn switches a plain
   connection to HTTP/2 when it opens with the h2c preface or asks for an ``Upgrade: h2c``, and
   its HTTP/2 layer (0.18) has bugs that only patches of its private code work around
   (:mod:`.hypercorn_h2`, docs/connections.md). With
   HTTP/2 off, a prior-knowledge client's connection is closed at once, and an upgrade request is
   answered over HTTP/1.1 as if it had not asked.
4. **With HTTP/2 on, hostile or unlucky frames reach bugs in hypercorn's H2 protocol**: a
   DATA frame for a stream already answered (``KeyError``), PRIORITY frames for streams never
   opened (``TooManyStreamsError`` ends a trio server), streams opened and reset at once
   (rapid reset, CVE-2023-44487). Those patches live in :mod:`.hypercorn_h2`.
5. **The asyncio worker's noise about connections that are already gone**
   (:func:`quiet_asyncio_worker`, entered by ``serve`` around hypercorn's asyncio worker): an
   ``OSError`` escaping hypercorn's connection close (#361, e.g. ``ETIMEDOUT`` after the kernel
   aborted a client that stopped reading), and CPython 3.11's ``CancelledError`` traceback for a
   connection task hypercorn cancelled on purpose. Nothing failed in either case; exactly those
   records are dropped, nothing else.
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
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import hypercorn

from . import header_deadline, hypercorn_h2

log = logging.getLogger("scoped_a2a.hypercorn_fixes")

TESTED = ("0.17.", "0.18.")
"""hypercorn versions (prefixes) whose private methods these fixes were written against."""

ACCEPT_LOG_INTERVAL = 10.0
"""Seconds between two log records about ``accept()`` running out of file descriptors."""

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

    _patch_eof(asyncio_tcp.TCPServer)
    _patch_eof(trio_tcp.TCPServer)
    _patch_http2(protocol.ProtocolWrapper)
    header_deadline.patch(protocol.ProtocolWrapper, _shielded)  # (slow heads: its module)
    _throttle_accept_errors()
    _skip_retries_on_closed_listeners()
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


# --- 2. one log record per interval when accept() runs out of descriptors ------------------


class AcceptErrorThrottle(logging.Filter):
    """Lets one "out of file descriptors" record through per interval; counts the rest."""

    def __init__(self, interval: float = ACCEPT_LOG_INTERVAL) -> None:
        super().__init__()
        self.interval = interval
        self._last = -float("inf")
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not _is_accept_exhaustion(record):
            return True
        now = time.monotonic()
        if now - self._last < self.interval:
            self.dropped += 1
            return False
        self._last = now
        if self.dropped:
            record.msg = f"{record.msg} ({self.dropped} more like this in the last interval)"
            self.dropped = 0
        return True


def _is_accept_exhaustion(record: logging.LogRecord) -> bool:
    message = str(record.msg)
    if "out of system resource" in message:  # asyncio: socket.accept() ... (EMFILE/ENFILE)
        return True
    return message.startswith("accept returned")  # trio.serve_listeners: EMFILE, ENFILE...


def _throttle_accept_errors() -> None:
    for name in ("asyncio", "trio.serve_listeners"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, AcceptErrorThrottle) for f in logger.filters):
            logger.addFilter(AcceptErrorThrottle())


def _skip_retries_on_closed_listeners() -> None:
    from asyncio import selector_events

    loop_class: Any = selector_events.BaseSelectorEventLoop
    if sys.version_info[:2] not in ((3, 11), (3, 12), (3, 13), (3, 14)):
        return  # written against these; elsewhere pending retries may log at shutdown
    start_serving: Callable[..., None] = loop_class._start_serving

    def _start_serving(self: Any, protocol_factory: Any, sock: Any, *args: Any,
                       **kwargs: Any) -> None:
        if sock.fileno() == -1:
            return  # an accept retry scheduled before the server closed its socket
        start_serving(self, protocol_factory, sock, *args, **kwargs)

    loop_class._start_serving = _start_serving


# --- 3. HTTP/2 only when allowed -----------------------------------------------------------


def _patch_http2(wrapper_class: Any) -> None:
    from hypercorn.events import Closed
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
            await handle(self, event)
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


@contextmanager
def quiet_asyncio_worker() -> Iterator[None]:
    """Drop the asyncio worker's reports about connections already gone (fix 5), then restore."""
    with _quiet_cancelled_connections(), _quiet_aborted_connections():
        yield


@contextmanager
def _quiet_aborted_connections() -> Iterator[None]:
    """While hypercorn's asyncio worker serves, an aborted connection is not an error report.

    hypercorn 0.18's asyncio worker lets a plain ``OSError`` out of its connection close
    (``TCPServer._close`` catches only ``ConnectionError``; hypercorn #361): ``ETIMEDOUT`` from a
    connection the kernel aborted (``TCP_USER_TIMEOUT``, set by ``serve``), or
    ``EHOSTUNREACH``. The connection is already gone and cleaned up; what escapes is a traceback
    through the loop's exception handler ("Task exception was never retrieved" on 3.11,
    "Unhandled exception in client_connected_cb" on 3.12+). This handler logs those at debug
    level and passes every other report to the handler it replaces, restored on exit.
    """
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and _raised_in_hypercorn_close(exc):
            log.debug("connection aborted: %s", exc)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        if loop.get_exception_handler() is handler:
            loop.set_exception_handler(previous)


def _raised_in_hypercorn_close(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "_close" and code.co_filename.endswith(
            os.path.join("hypercorn", "asyncio", "tcp_server.py")
        ):
            return True
        tb = tb.tb_next
    return False




class _CancelledConnectionFilter(logging.Filter):
    """Drops Python 3.11's traceback for a connection task hypercorn cancelled on purpose.

    hypercorn's asyncio worker cancels the connections still open when its graceful wait ends
    (only a client that stopped sending or reading, once the runs have been answered). The
    done-callback in CPython 3.11's ``asyncio/streams.py`` then calls ``task.exception()`` on
    the cancelled task, which raises, and the loop logs "Exception in callback
    StreamReaderProtocol.connection_made..." with a CancelledError traceback. 3.12 checks
    ``task.cancelled()`` first. Nothing failed: only that exact record is dropped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(exc, asyncio.CancelledError)
            and record.getMessage().startswith(
                "Exception in callback StreamReaderProtocol.connection_made")
        )


@contextmanager
def _quiet_cancelled_connections() -> Iterator[None]:
    """Install :class:`_CancelledConnectionFilter` on the ``asyncio`` logger (Python 3.11)."""
    if sys.version_info >= (3, 12):
        yield
        return
    target = logging.getLogger("asyncio")
    quiet = _CancelledConnectionFilter()
    target.addFilter(quiet)
    try:
        yield
    finally:
        target.removeFilter(quiet)
