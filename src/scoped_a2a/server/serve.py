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

import logging
import socket
from typing import Any

import anyio
import sniffio
from anyio.abc import TaskStatus
from hypercorn.config import Config

from .tls import configure_tls

log = logging.getLogger("scoped_a2a.serve")

SHUTDOWN_SLACK = 5.0
"""Seconds beyond the grace periods before serve gives up on hypercorn and returns."""


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=1024)
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
    certfile: str | None = None,
    keyfile: str | None = None,
    ca_certs: str | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` (0 picks a free port) until ``shutdown`` is set.

    :param grace: seconds for requests in flight to finish on shutdown (default: the app's
        ``grace``, else 10).
    :returns: after a graceful shutdown, within ``grace + drain + 5`` seconds of ``shutdown``
        (``drain``: the app's ``drain_seconds``, runs then push deliveries; else ``grace``).
    :param certfile: serve HTTPS with this certificate (PEM) and ``keyfile``.
    :param ca_certs: ask clients for a certificate from this CA (optional for the client; one
        that does not verify fails the handshake); see :mod:`.tls` for the mTLS principal.
    Raises ValueError before listening when the TLS files cannot be loaded.
    """
    backend = sniffio.current_async_library()
    grace = grace if grace is not None else float(getattr(app, "grace", 10.0))
    config = Config()
    if certfile is not None or keyfile is not None:
        if certfile is None or keyfile is None:
            raise ValueError("TLS needs both a certificate file and its key file")
        configure_tls(config, certfile=certfile, keyfile=keyfile, ca_certs=ca_certs)
    elif ca_certs is not None:
        raise ValueError("client certificates (ca_certs) need TLS: give certfile and keyfile")
    scheme = "https" if certfile else "http"
    sock = _listen(host, port)
    bound_port: int = sock.getsockname()[1]
    if getattr(app, "public_url", "unset") is None:
        shown = f"[{host}]" if ":" in host else host
        app.public_url = f"{scheme}://{shown}:{bound_port}/"
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

                    await hypercorn.asyncio.serve(app, config, shutdown_trigger=trigger)
                tg.cancel_scope.cancel()

            tg.start_soon(deadline)
            tg.start_soon(_announce, app, bound_port, task_status)
            log.info("serving on %s://%s:%d/ (%s)", scheme, host, bound_port, backend)
            tg.start_soon(hypercorn_serve)


async def _announce(app: Any, port: int, task_status: TaskStatus[int]) -> None:
    """Report the port once the app's lifespan has started (the socket already listens)."""
    ready = getattr(app, "ready", None)
    if isinstance(ready, anyio.Event):
        await ready.wait()
    task_status.started(port)
