"""The command line's SQLite side: ``serve --store sqlite:PATH`` (docs/stores.md).

Tasks, logs, push configs, claims and detached runs are kept in one SQLite file, so a restart or
a ``kill -9`` loses nothing that was acknowledged. ``serve`` runs the durable queue's worker in
its own server nursery (one process owns the file: there is no separate ``worker`` command for
it). Start-up problems with the file (not a database, a newer schema, a read-only directory,
another process holding it) are one line and exit status 2, before anything listens.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio

from .help import StartupError
from .startup import listen

PREFIX = "sqlite:"


def sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:PATH[?synchronous=full|normal]`` store URL (``sqlite:///abs``
    too), else None."""
    if not url.startswith(PREFIX):
        return None
    path = url[len(PREFIX):].split("?", 1)[0]
    if path.startswith("//"):
        path = path[2:]
    if not path:
        raise SystemExit("--store sqlite:PATH needs a file path, e.g. sqlite:tasks.db")
    sqlite_synchronous(url)
    return path


def sqlite_synchronous(url: str) -> str:
    """The ``synchronous`` setting of an SQLite store URL (``?synchronous=normal``; default
    full, docs/stores.md says what each risks)."""
    query = url.split("?", 1)[1] if "?" in url else ""
    value = "full"
    for part in filter(None, query.split("&")):
        name, _, given = part.partition("=")
        if name != "synchronous" or given.lower() not in ("full", "normal"):
            raise SystemExit(f"--store {url}: the one option is ?synchronous=full|normal, "
                             f"not {part!r}")
        value = given.lower()
    return value


def check(url: str) -> None:
    """SystemExit with one line for an ``sqlite:`` URL without a path or with an unknown
    option (before the event loop starts)."""
    sqlite_path(url)


async def serve(args: argparse.Namespace, make_app: Callable[..., Any],
                shutdown: anyio.Event) -> None:
    """``serve`` with tasks in an SQLite file and the durable queue's worker in-process,
    until ``shutdown`` is set and the app has drained.

    ``make_app(store, detached)`` builds the app as ``serve`` configured it. Raises
    StartupError (one line) when the file cannot be used. Cancelled: stops at once; what was
    acknowledged is in the file.
    """
    from ..runtime.durable_worker import Worker
    from ..store.sqlite import StoreOpenError, open_sqlite_store

    path = sqlite_path(args.store)
    assert path is not None
    async with AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(open_sqlite_store(
                path, max_ended_tasks=args.max_ended_tasks,
                max_ended_bytes=args.max_ended_bytes, retain=args.retain,
                synchronous=sqlite_synchronous(args.store)))
        except StoreOpenError as exc:
            raise StartupError(f"--store {args.store}: {exc}") from None
        async with anyio.create_task_group() as nursery:
            # The server nursery is opened here so the worker can start runs in it at once.
            app = make_app(store, nursery)
            await app.push.resume(await store.pending_pushes())
            worker = Worker(store.queue, app.runner, concurrency=args.concurrency,
                            claim_idle=args.claim_idle)
            nursery.start_soon(worker.run)
            await listen(args, app, shutdown)
            nursery.cancel_scope.cancel()
