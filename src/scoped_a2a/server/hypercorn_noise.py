"""hypercorn's log noise about connections that are already gone, and about running out of
file descriptors: what is dropped, what is kept (installed by :func:`.hypercorn_fixes.install`
and, for the asyncio worker, entered by ``serve`` around it: :func:`quiet_asyncio_worker`).

1. **fd exhaustion floods the log.** When ``accept()`` fails for lack of descriptors, trio's
   ``serve_listeners`` logs a traceback every 0.1 s. asyncio's selector loop (CPython 3.11 to
   3.13) does not stop its accept loop at the error: it tries ``backlog`` (hypercorn: 100) more
   accepts, logging each and scheduling a retry for each, so it logs ~100 tracebacks a second
   and, when the server closes, each pending retry fails on the closed socket with another
   traceback. A filter keeps one record per ``ACCEPT_LOG_INTERVAL`` seconds per logger, saying
   how many it dropped, and a retry for a listening socket that has been closed does nothing.
2. **The asyncio worker's noise about connections that are already gone**: an ``OSError``
   escaping hypercorn's connection close (#361, e.g. ``ETIMEDOUT`` after the kernel aborted a
   client that stopped reading), and CPython 3.11's ``CancelledError`` traceback for a
   connection task hypercorn cancelled on purpose. Nothing failed in either case; exactly those
   records are dropped, nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("scoped_a2a.hypercorn_fixes")

ACCEPT_LOG_INTERVAL = 10.0
"""Seconds between two log records about ``accept()`` running out of file descriptors."""


def install() -> None:
    """Throttle the accept-error records and skip retries on closed listeners (once per
    process, from :func:`.hypercorn_fixes.install`; idempotent). Raises nothing."""
    _throttle_accept_errors()
    _skip_retries_on_closed_listeners()


# --- 1. one log record per interval when accept() runs out of descriptors ------------------


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


# --- 2. the asyncio worker: no reports about connections already gone ---------------------


@contextmanager
def quiet_asyncio_worker() -> Iterator[None]:
    """Drop the asyncio worker's reports about connections already gone (fix 2), then restore."""
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
