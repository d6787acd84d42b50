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

from .auth_options import tls_from_args
from .help import StartupError

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


async def serve_on_sqlite(args: argparse.Namespace, make_app: Callable[..., Any],
                          on_signals: Callable[..., Any]) -> None:
    """``serve`` with tasks in an SQLite file and the durable queue's worker in-process.

    ``make_app(store, detached)`` builds the app as ``serve`` configured it. Raises
    StartupError (one line) when the file cannot be used.
    """
    from ..runtime.durable_worker import Worker
    from ..server.serve import serve
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
            shutdown = anyio.Event()
            await nursery.start(on_signals, shutdown, nursery.cancel_scope)
            await app.push.resume(await store.pending_pushes())
            worker = Worker(store.queue, app.runner, concurrency=args.concurrency,
                            claim_idle=args.claim_idle)
            nursery.start_soon(worker.run)
            await serve(app, host=args.host, port=args.port, shutdown=shutdown,
                        grace=args.grace, http2=args.http2, gc_tuning=not args.no_gc_tuning,
                        **tls_from_args(args))
            nursery.cancel_scope.cancel()
