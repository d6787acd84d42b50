"""The server commands' signals: SIGINT/SIGTERM shut down (gracefully, then at once), SIGHUP
re-reads credentials.

Each watcher reports started once its handler is installed (``TaskGroup.start``): a signal that
arrives before that gets Python's default action, so the commands start them before anything
listens, and before the slow part of their start-up inside the event loop.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from .interrupt import ctrl_c_seen

if TYPE_CHECKING:
    from ..server.auth import Authenticator

log = logging.getLogger("scoped_a2a.cli")

OnSignals = Callable[..., Coroutine[Any, Any, None]]
"""``on_signals(shutdown, scope)``, run with ``TaskGroup.start``: started once its signal
handlers are installed."""


async def on_signals(shutdown: anyio.Event, scope: anyio.CancelScope, *,
                     task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The first SIGINT/SIGTERM sets ``shutdown`` (graceful); a second cancels ``scope`` and
    returns. Reports started once the handlers are installed; cancelled, it restores them.
    A Ctrl-C seen before they were installed counts as the first signal."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        if ctrl_c_seen():
            log.info("SIGINT (before its handler was installed): shutting down gracefully")
            shutdown.set()
        async for signum in signals:
            if shutdown.is_set():
                log.warning("second signal: stopping now")
                scope.cancel()
                return
            log.info("%s: shutting down gracefully", signal.Signals(signum).name)
            shutdown.set()


async def reload_on_sighup(
    auth: Authenticator, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Re-read every scheme's keys on each SIGHUP, until cancelled; reports started once the
    handler is installed (before it, SIGHUP's default action ends the process)."""
    with anyio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            log.info("SIGHUP: reloading credentials")
            auth.reload()


def serve_signals(auth: Authenticator | None) -> OnSignals:
    """``serve``'s watcher: :func:`on_signals`, plus :func:`reload_on_sighup` when there are
    credentials to reload. Started once both handlers are installed; ends (cancelling the
    SIGHUP watcher) when :func:`on_signals` does."""

    async def watch(shutdown: anyio.Event, scope: anyio.CancelScope, *,
                    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as signals:
            if auth is not None:
                await signals.start(reload_on_sighup, auth)
            await on_signals(shutdown, scope, task_status=task_status)
            signals.cancel_scope.cancel()

    return watch
