"""``serve``: run an app under hypercorn on the running AnyIO backend.

Usable inside an AnyIO service's task group (``await tg.start(serve, app, ...)`` hands back the
bound port). Shutdown is graceful and bounded: when ``shutdown`` is set, the app refuses new sends
at once, hypercorn stops accepting and waits up to ``grace`` seconds for requests in flight, the
app's lifespan gives runs their grace period and records the rest, and a deadline around the whole
server makes sure this returns even where hypercorn's asyncio worker hangs in
``Server.wait_closed()`` (Python 3.12+, hypercorn #308). Cancelling ``serve`` itself stops at once:
runs are cancelled and recorded with reason ``shutdown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import sniffio
from anyio.abc import TaskStatus
from hypercorn.config import Config

log = logging.getLogger("scoped_a2a.serve")

SHUTDOWN_SLACK = 5.0
"""Seconds beyond the grace periods before serve gives up on hypercorn and returns."""


MAX_STALL_TIMEOUT = 2**31 / 1000
"""TCP_USER_TIMEOUT is an int of milliseconds: a longer stall timeout (or inf) sets no option."""
STREAM_SNDBUF = 64 << 10
"""SO_SNDBUF asked for on accepted sockets (the kernel doubles it): what it buffers per client."""


def _listen(host: str, port: int, *, stall_timeout: float | None = None) -> socket.socket:
    """The listening socket, with the options every accepted connection inherits (Linux).

    ``stall_timeout`` (the app's ``stream_write_timeout``) becomes ``TCP_USER_TIMEOUT``: the
    kernel aborts a connection (ETIMEDOUT) once data it sent has gone unacknowledged, or the
    client's receive window has stayed zero, for that long, i.e. once the client has accepted no
    bytes for that long (caveat: a window too small for the next segment counts as zero, so a
    reader that lags a full small buffer behind for that long is closed too; docs/streams.md).
    It applies to every response on the server; an idle connection is never affected. This is
    what closes a stream whose client stopped reading on both hypercorn workers: the trio worker
    shields its socket writes, so no deadline in the app can interrupt them, while the kernel
    can. hypercorn then sees the socket error, closes the connection and delivers
    ``http.disconnect``, which the disconnect watcher turns into cancellation. A small
    ``SO_SNDBUF`` bounds what the kernel buffers per client (unbounded autotuning let 500 stuck
    clients pin about 700 MiB of TCP memory), so a stuck client reaches a zero window quickly.
    Where the platform lacks an option it is skipped (the app's own write deadline still
    applies).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=1024)
    if stall_timeout is not None and 0 < stall_timeout < MAX_STALL_TIMEOUT:
        user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux only
        # Refused options are skipped: the app's own write deadline still applies.
        if user_timeout is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, user_timeout,
                                max(1, round(stall_timeout * 1000)))
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SNDBUF)
    sock.setblocking(False)
    return sock


@contextlib.contextmanager
def _quiet_aborted_connections() -> Iterator[None]:
    """While hypercorn's asyncio worker serves, an aborted connection is not an error report.

    hypercorn 0.18's asyncio worker lets a plain ``OSError`` out of its connection close
    (``TCPServer._close`` catches only ``ConnectionError``; hypercorn #361): ``ETIMEDOUT`` from a
    connection the kernel aborted (``TCP_USER_TIMEOUT``, set by :func:`_listen`), or
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


async def serve(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    shutdown: anyio.Event | None = None,
    grace: float | None = None,
    access_log: bool = False,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` (0 picks a free port) until ``shutdown`` is set.

    :param grace: seconds for requests in flight to finish on shutdown (default: the app's
        ``grace``, else 10).
    :returns: after a graceful shutdown, within ``grace + drain + 5`` seconds of ``shutdown``
        (``drain``: the app's ``drain_seconds``, runs then push deliveries; else ``grace``).
    """
    backend = sniffio.current_async_library()
    grace = grace if grace is not None else float(getattr(app, "grace", 10.0))
    sock = _listen(host, port, stall_timeout=getattr(app, "stream_write_timeout", None))
    bound_port: int = sock.getsockname()[1]
    if getattr(app, "public_url", "unset") is None:
        shown = f"[{host}]" if ":" in host else host
        app.public_url = f"http://{shown}:{bound_port}/"
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) the socket from here
    config.graceful_timeout = grace
    # The app's lifespan drain: its runs, then its push deliveries (A2AApp.drain_seconds).
    drain = float(getattr(app, "drain_seconds", grace))
    config.shutdown_timeout = drain + SHUTDOWN_SLACK
    config.accesslog = logging.getLogger("hypercorn.access") if access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.keep_alive_timeout = 75

    stopping = anyio.Event()
    shutdown = shutdown or anyio.Event()

    async def trigger() -> None:
        await shutdown.wait()
        begin = getattr(app, "begin_shutdown", None)
        if begin is not None:
            begin()
        stopping.set()

    with anyio.CancelScope() as server_scope:
        async with anyio.create_task_group() as tg:

            async def deadline() -> None:
                await stopping.wait()
                await anyio.sleep(grace + drain + SHUTDOWN_SLACK)
                log.error("hypercorn did not shut down in time; stopping it")
                server_scope.cancel()

            async def hypercorn_serve() -> None:
                # In a child task on purpose: on Python 3.11, hypercorn's asyncio worker can
                # leave a native cancel request on the task that awaited it (its TaskGroup
                # cancels its parent on shutdown), which anyio would then take for a cancel
                # from outside. A child task ends with it instead.
                if backend == "trio":
                    import hypercorn.trio

                    await hypercorn.trio.serve(app, config, shutdown_trigger=trigger)
                else:
                    import hypercorn.asyncio

                    with _quiet_aborted_connections():
                        await hypercorn.asyncio.serve(app, config, shutdown_trigger=trigger)
                tg.cancel_scope.cancel()

            tg.start_soon(deadline)
            tg.start_soon(_announce, app, bound_port, task_status)
            log.info("serving on http://%s:%d/ (%s)", host, bound_port, backend)
            tg.start_soon(hypercorn_serve)


async def _announce(app: Any, port: int, task_status: TaskStatus[int]) -> None:
    """Report the port once the app's lifespan has started (the socket already listens)."""
    ready = getattr(app, "ready", None)
    if isinstance(ready, anyio.Event):
        await ready.wait()
    task_status.started(port)
