"""``serve``: run an app under hypercorn on the running AnyIO backend.

Usable inside an AnyIO service's task group (``await tg.start(serve, app, ...)`` hands back the
bound port). Shutdown is graceful and bounded, and its order is the point: when ``shutdown`` is
set, the app drains its runs *first*, while hypercorn still serves every connection (new sends,
also on open keep-alive connections, get -32000; runs get ``grace`` seconds, the rest are
cancelled with reason ``shutdown``; every waiting caller is answered with its final task). Only
then is hypercorn told to stop: it closes the listener and idle connections, lets the answers
finish (``ANSWER_SECONDS`` at most), and runs the lifespan shutdown, which drains push
deliveries. Told first, hypercorn would drop busy connections when its ``graceful_timeout``
expired, before the lifespan shutdown even started, and the callers would get no answer.

Run on its own (``anyio.run(lambda: serve(app))``, no ``shutdown`` event), it drains on SIGINT or
SIGTERM as the CLI does (:func:`shut_down_on_signals`): the first signal is a graceful shutdown,
a second one stops at once; either way ``serve`` returns normally (no KeyboardInterrupt).

Cancelling ``serve`` itself (the CLI's second signal) is a shutdown with no grace: runs are
cancelled at once and recorded with reason ``shutdown``, their callers are answered, hypercorn
gets ``STOP_NOW_SECONDS`` to stop, then the cancellation propagates. hypercorn runs shielded
for this: cancelled, its asyncio worker fails in its own clean-up, and the dropped connections
would count as hang-ups. A deadline around the whole server makes sure this returns even where
hypercorn's asyncio worker hangs in ``Server.wait_closed()`` (Python 3.12+, hypercorn #308).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

import anyio
import sniffio
from anyio.abc import TaskStatus
from hypercorn.config import Config

from ..runtime.ending import RECORD_TIMEOUT
from . import gc_tuning, header_deadline, hypercorn_fixes, hypercorn_noise
from .memory_trim import trim_after_bursts
from .tls import configure_tls

log = logging.getLogger("scoped_a2a.serve")

SHUTDOWN_SLACK = 5.0
"""Seconds beyond the grace periods before serve gives up on hypercorn and returns."""

ANSWER_SECONDS = 5.0
"""Seconds requests still open once the app's runs have ended get to finish.

Callers waiting on a run are answered as soon as it records its end, within milliseconds; this
only bounds requests that wait on something else (a stream whose client stopped reading)."""


STOP_NOW_SECONDS = 2.0
"""Seconds hypercorn gets to stop once ``serve`` is cancelled (runs end at once, callers are
answered within milliseconds; pending push deliveries are cut off)."""


STALL_SECONDS = 2.0
"""Seconds past hypercorn's graceful wait before serve takes it for hung and stops it."""


MAX_STALL_TIMEOUT = 2**31 / 1000
"""TCP_USER_TIMEOUT is an int of milliseconds: a longer stall timeout (or inf) sets no option."""
KEEP_ALIVE_TIMEOUT = 75.0
"""Seconds an idle connection (no request in progress) stays open (hypercorn's idle timer):
longer than clients' pools keep theirs, so that the client closes it (see ``serve``)."""

BACKLOG = 1024
"""Connections the kernel queues before accept (capped by net.core.somaxconn): a burst of
connects (a balancer's pool, c=64 clients opening at once) is queued, not refused or dropped.
Set on the socket and as hypercorn's ``config.backlog``: hypercorn calls ``listen()`` again on
the socket it is given, with its own default (100) unless told."""
STREAM_SNDBUF = 64 << 10
"""SO_SNDBUF asked for on accepted sockets (the kernel doubles it): what it buffers per client."""


def _listen(host: str, port: int, *, stall_timeout: float | None = None,
            reuse_port: bool = False) -> socket.socket:
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
    # reuse_port: several processes listen on the port; the kernel spreads connections
    # (serve --workers, cli/workers.py).
    sock = socket.create_server((host, port), family=family, backlog=BACKLOG,
                                reuse_port=reuse_port)
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


async def serve(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    shutdown: anyio.Event | None = None,
    grace: float | None = None,
    access_log: bool = False,
    http2: bool = False,
    certfile: str | None = None,
    keyfile: str | None = None,
    ca_certs: str | None = None,
    gc_tuning: bool = True,
    memory_trim: bool = True,
    handle_signals: bool | None = None,
    reuse_port: bool = False,
    header_timeout: float | None = header_deadline.HEADER_TIMEOUT,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` (0 picks a free port) until ``shutdown`` is set.

    :param grace: seconds work in flight gets on shutdown (default: the app's ``grace``, else
        10): an app with ``drain(grace)`` (:class:`~scoped_a2a.A2AApp`) gives it to its runs;
        for any other ASGI app it is hypercorn's ``graceful_timeout`` for requests in flight.
    :param http2: allow HTTP/2 clients (h2c, and h2 by ALPN over TLS). Off by default:
        hypercorn 0.18's HTTP/2 layer has bugs only patches of its private code work around
        (docs/connections.md, all handled on 0.17/0.18: lost requests, a PRIORITY flood, rapid
        reset, no back-pressure); with it off, a client that opens with the HTTP/2 preface
        has its connection closed, ALPN never picks h2, and everyone else is served over
        HTTP/1.1. Always on for an app that serves gRPC (``A2AApp(grpc=True)``).
    :returns: after a graceful shutdown: for an A2AApp whose runs obey cancellation, about
        ``grace`` seconds after ``shutdown`` (plus the push grace if deliveries are pending);
        with a client that neither sends nor reads, ``ANSWER_SECONDS`` later (hypercorn closes
        its connection; where hypercorn hangs instead, serve stops it ``STALL_SECONDS`` after
        that). The deadline for each phase: the runs' drain ``grace + RECORD_TIMEOUT + 5``,
        the answers ``ANSWER_SECONDS + STALL_SECONDS``, the lifespan ``drain + 5``
        (``drain``: the app's ``drain_seconds``, else ``grace``). When cancelled, within
        ``STOP_NOW_SECONDS``, then the cancellation propagates.
    :param certfile: serve HTTPS with this certificate (PEM) and ``keyfile``.
    :param ca_certs: ask clients for a certificate from this CA (optional for the client; one
        that does not verify fails the handshake); see :mod:`.tls` for the mTLS principal.
    :param gc_tuning: once the app has started, freeze the start-up objects and raise the
        collector's young threshold (:mod:`.gc_tuning`, once per process; also off with
        ``SCOPED_A2A_GC_TUNING=0``).
    :param memory_trim: hand memory malloc holds free back to the system after bursts
        (:mod:`.memory_trim`, glibc only; also off with ``SCOPED_A2A_MEMORY_TRIM=0``).
    :param handle_signals: drain on SIGINT/SIGTERM (:func:`shut_down_on_signals`: the first
        signal is a graceful shutdown, a second stops at once; ``serve`` then returns normally).
        Default: when no ``shutdown`` event is given, since nothing else could stop the server
        gracefully; a caller that passes ``shutdown`` is taken to handle signals itself. Only
        in the main thread (elsewhere Python delivers no signals); the previous handlers are
        restored when ``serve`` returns.
    :param reuse_port: listen with ``SO_REUSEPORT``, so that other processes (other workers
        of ``serve --workers``) listen on the same port and the kernel spreads connections.
    :param header_timeout: once an HTTP/1.1 request's first bytes have arrived, its request
        line and headers must arrive within this many seconds, or the connection gets 408 and
        is closed (:mod:`.header_deadline`); on an HTTP/2 connection with no request in
        progress, the same for an unfinished frame or header block (GOAWAY, closed); None: no
        deadline but the keep-alive timeout.
    Raises ValueError before listening when the TLS files cannot be loaded.
    """
    backend = sniffio.current_async_library()
    grace = grace if grace is not None else float(getattr(app, "grace", 10.0))
    drain_runs = getattr(app, "drain", None)
    config = Config()
    if certfile is not None or keyfile is not None:
        if certfile is None or keyfile is None:
            raise ValueError("TLS needs both a certificate file and its key file")
        configure_tls(config, certfile=certfile, keyfile=keyfile, ca_certs=ca_certs)
    elif ca_certs is not None:
        raise ValueError("client certificates (ca_certs) need TLS: give certfile and keyfile")
    scheme = "https" if certfile else "http"
    sock = _listen(host, port, stall_timeout=getattr(app, "stream_write_timeout", None),
                   reuse_port=reuse_port)
    bound_port: int = sock.getsockname()[1]
    if getattr(app, "public_url", "unset") is None:
        shown = f"[{host}]" if ":" in host else host
        app.public_url = f"{scheme}://{shown}:{bound_port}/"
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) the socket from here
    config.backlog = BACKLOG  # hypercorn listens again with this (each --workers process too)
    # With an app that drains its own runs, hypercorn's wait only has to cover the answers.
    config.graceful_timeout = ANSWER_SECONDS if drain_runs is not None else grace
    # The app's lifespan shutdown: push deliveries (its runs have ended by then).
    drain = float(getattr(app, "drain_seconds", grace))
    config.shutdown_timeout = drain + SHUTDOWN_SLACK
    config.accesslog = logging.getLogger("hypercorn.access") if access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Idle keep-alive connections stay open longer than clients' own pools keep them (httpx 5 s,
    # nginx upstream 60 s), so the client, not us, closes them: a server closing an idle
    # connection races the client's next request on it. A connection the client closed is
    # released at once (hypercorn_fixes), so this does not hold descriptors.
    config.keep_alive_timeout = KEEP_ALIVE_TIMEOUT
    # ... which a head trickling in does not shorten: a head has its own deadline.
    header_deadline.configure(config, header_timeout)
    # gRPC is HTTP/2: an app serving it (A2AApp(grpc=True)) has HTTP/2 on whatever was asked.
    http2 = http2 or getattr(app, "grpc", None) is not None
    setattr(config, hypercorn_fixes.HTTP2_FLAG, http2)
    # Over TLS, ALPN picks the protocol before any HTTP byte (the guard in hypercorn_fixes sees
    # only cleartext prefaces): offer h2 only when HTTP/2 is on.
    config.alpn_protocols = ["h2", "http/1.1"] if http2 else ["http/1.1"]
    if http2:
        # After this many streams hypercorn sends HTTP/2 GOAWAY, and requests the client had
        # already sent on the connection are lost; one connection is one client, so no cap.
        config.keep_alive_max_requests = 1 << 62
    hypercorn_fixes.install()

    if handle_signals is None:
        handle_signals = shutdown is None
    if threading.current_thread() is not threading.main_thread():
        handle_signals = False
    stopping = anyio.Event()  # shutdown has begun (the deadline counts from here)
    hurry = anyio.Event()  # serve was cancelled from outside: skip the grace periods
    drained = anyio.Event()  # the app's runs have ended (hypercorn is told to stop now)
    cut_grace = anyio.CancelScope()
    shutdown = shutdown or anyio.Event()

    async def trigger() -> None:
        # hypercorn starts its shutdown when this returns: return only once the app's runs
        # have ended and their callers are being answered (see the module docstring).
        await stopping.wait()
        if drain_runs is None:
            begin = getattr(app, "begin_shutdown", None)
            if begin is not None:
                begin()
            drained.set()
            return
        with cut_grace:
            await drain_runs(grace)
        if cut_grace.cancelled_caught:
            # The drain's own clean-up has cancelled the runs: wait for their ends.
            await drain_runs(0.0)
        drained.set()

    def stop(*, now: bool) -> None:
        stopping.set()
        if now:
            hurry.set()
            cut_grace.cancel()

    async def on_shutdown() -> None:
        await shutdown.wait()
        stop(now=False)

    async def on_cancel() -> None:
        # hypercorn's asyncio worker cannot be cancelled cleanly (its clean-up awaits again,
        # raises InvalidStateError, and Python 3.11 logs a CancelledError traceback per
        # connection), and cancelling its connections would count as hang-ups. So it runs
        # shielded, and a cancel of serve becomes a shutdown with no grace period instead.
        try:
            await anyio.sleep_forever()
        finally:
            stop(now=True)

    async def deadline() -> None:
        # Phase by phase, so a hang is caught soon after the phase it happens in.
        await stopping.wait()
        with anyio.move_on_after(grace + RECORD_TIMEOUT + SHUTDOWN_SLACK):
            await drained.wait()  # the app's drain, bounded by itself
        lifespan_ending = getattr(app, "lifespan_ending", None)
        answers = config.graceful_timeout  # left to the last phase for an app that cannot tell
        if isinstance(lifespan_ending, anyio.Event):
            answers = 0.0
            # hypercorn's graceful wait for the answers; its asyncio worker hangs here under
            # Python 3.12+ while a connection stays open (Server.wait_closed, hypercorn #308).
            with anyio.move_on_after(config.graceful_timeout + STALL_SECONDS):
                await lifespan_ending.wait()
            if not lifespan_ending.is_set():
                log.error("hypercorn did not close its connections in time; stopping it")
                server_scope.cancel()
                return
        await anyio.sleep(answers + drain + SHUTDOWN_SLACK)  # the lifespan has its own timeout
        log.error("hypercorn did not shut down in time; stopping it")
        server_scope.cancel()

    async def stop_now_deadline() -> None:
        await hurry.wait()
        await anyio.sleep(STOP_NOW_SECONDS)
        # Expected when push deliveries were pending (their grace is skipped), so a warning.
        log.warning("stopping hypercorn %gs after serve was cancelled; its lifespan shutdown "
                    "had not finished", STOP_NOW_SECONDS)
        server_scope.cancel()

    async with anyio.create_task_group() as outside:
        outside.start_soon(on_cancel)
        if handle_signals:
            outside.start_soon(shut_down_on_signals, shutdown, lambda: stop(now=True))
        with anyio.CancelScope(shield=True) as server_scope:
            async with anyio.create_task_group() as tg:

                async def hypercorn_serve() -> None:
                    # In a child task on purpose: on Python 3.11, hypercorn's asyncio worker
                    # can leave a native cancel request on the task that awaited it (its
                    # TaskGroup cancels its parent on shutdown), which anyio would then take
                    # for a cancel from outside. A child task ends with it instead.
                    if backend == "trio":
                        import hypercorn.trio

                        await hypercorn.trio.serve(app, config, shutdown_trigger=trigger)
                    else:
                        import hypercorn.asyncio

                        with hypercorn_noise.quiet_asyncio_worker():
                            await hypercorn.asyncio.serve(app, config, shutdown_trigger=trigger)
                    tg.cancel_scope.cancel()

                tg.start_soon(on_shutdown)
                tg.start_soon(deadline)
                tg.start_soon(stop_now_deadline)
                line = ("serving on %s://%s:%d/ (%s)", scheme, host, bound_port,
                        _protocols(backend, app, http2))
                tg.start_soon(_announce, app, bound_port, gc_tuning, line, task_status)
                if memory_trim:
                    tg.start_soon(trim_after_bursts)
                tg.start_soon(hypercorn_serve)
        outside.cancel_scope.cancel()


def _protocols(backend: str, app: Any, http2: bool) -> str:
    """What the start-up line says is served besides the backend: HTTP/2, and gRPC (whose
    clients dial ``host:port``, not the URL), so an operator sees it without reading flags."""
    parts = [backend]
    if getattr(app, "grpc", None) is not None:
        parts.append("HTTP/2; gRPC lf.a2a.v1.A2AService on the same port")
    elif http2:
        parts.append("HTTP/2")
    return "; ".join(parts)


def announce(message: str, *args: object, level: int = logging.INFO) -> None:
    """Log a line about the server's life (listening, stopping) on ``scoped_a2a.serve``.

    When logging is not configured at all (no handler anywhere, as in a bare
    ``anyio.run(lambda: serve(app))``), Python would drop an INFO record: the line goes to
    stderr instead, so a user always sees where the server listens."""
    if log.hasHandlers():
        log.log(level, message, *args)
    else:
        print(f"scoped_a2a: {message % args}", file=sys.stderr, flush=True)


async def shut_down_on_signals(shutdown: anyio.Event, stop_now: Callable[[], object]) -> None:
    """The first SIGINT or SIGTERM sets ``shutdown`` (graceful), a second calls ``stop_now``.

    ``serve`` runs this when it handles signals itself; the CLI runs it with the cancel of its
    own scope as ``stop_now``. Returns after the second signal. While it runs the signals do
    not raise KeyboardInterrupt or end the process; cancelling it restores the previous
    handlers. Call it from the main thread (Python delivers signals nowhere else).
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if shutdown.is_set():
                announce("second signal: stopping now", level=logging.WARNING)
                stop_now()
                return
            announce("%s: shutting down gracefully", signal.Signals(signum).name)
            shutdown.set()


async def _announce(app: Any, port: int, tune_gc: bool, line: tuple[Any, ...],
                    task_status: TaskStatus[int]) -> None:
    """Say ``serving on`` (``line``) and report the port once the app's lifespan has started
    (an app without a ``ready`` event: at once); the socket listens already.

    Why not before: a client (a test, a supervisor's health check, a script reading the line)
    acts on the line at once, and until the lifespan has started (the store open, the nursery
    running) hypercorn accepts nothing: a request would wait in the kernel's queue, or be reset
    if start-up fails. So the line means the server answers now. Start-up is over then, so this
    is also where the collector is tuned (what is alive now lives as long as the server).
    Cancelled before then (start-up failed, serve cancelled), it says nothing."""
    ready = getattr(app, "ready", None)
    if isinstance(ready, anyio.Event):
        await ready.wait()
    announce(*line)
    if tune_gc:
        gc_tuning.apply()
    task_status.started(port)
