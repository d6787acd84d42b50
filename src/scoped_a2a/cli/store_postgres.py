"""``serve --store postgresql://...`` (and ``worker``): tasks and durable detached runs in
PostgreSQL, shared by any number of processes (docs/postgres.md).

psycopg is imported only once a PostgreSQL URL is given (``pip install 'scoped-a2a[postgres]'``).
``serve`` runs a worker of the durable queue in its own server nursery unless ``--no-worker``.
Credentials come from the URL or libpq's environment (``PGPASSWORD``, ``PGPASSFILE``, ...) and
are never printed: messages name the server as host:port/database.

PostgreSQL must answer before anything starts: if it does not (within ``--store-wait`` seconds,
none by default), or refuses the credentials, or holds a newer schema, the command stops with
one line and exit status 2; a shutdown signal during that wait ends it (exit 0).
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .help import StartupError
from .startup import listen


def check(url: str) -> None:
    """SystemExit with one line unless the postgres extra is installed (before the loop)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise SystemExit(
            "the PostgreSQL store needs psycopg: pip install 'scoped-a2a[postgres]'"
        ) from None


def add_postgres_options(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The PostgreSQL store's options, shared by ``serve`` and ``worker``."""
    g.add_argument("--postgres-schema", default="scoped_a2a", metavar="NAME",
                   help="with a PostgreSQL store: the schema its tables live in (apps sharing "
                        "one database differ here)")
    g.add_argument("--postgres-pool", type=int, default=12, metavar="N",
                   help="with a PostgreSQL store: connections this process opens at most "
                        "(plus one that listens for wake-ups)")
    g.add_argument("--postgres-sync-events", action="store_true",
                   help="with a PostgreSQL store: commit every event of a running task "
                        "synchronously too (slower; by default only creates, claims, queued "
                        "runs and ends wait for the WAL flush: docs/postgres.md)")
    g.add_argument("--postgres-key-file", default=None, metavar="PATH",
                   help="with a PostgreSQL store: the key that seals push configs (default "
                        "$SCOPED_A2A_POSTGRES_KEY_FILE or ./scoped_a2a-postgres.key, created on "
                        "first use; every replica needs the same file)")


@asynccontextmanager
async def _open(args: argparse.Namespace, shutdown: anyio.Event) -> AsyncIterator[Any]:
    """The store, once PostgreSQL answers (within ``--store-wait``); None if ``shutdown`` was
    set first. StartupError (one line) when it cannot be used."""
    from ..store.postgres import StoreOpenError, open_postgres_store

    if args.postgres_pool < 1:
        raise StartupError("--postgres-pool must be at least 1")
    deadline = anyio.current_time() + args.store_wait
    while True:
        try:
            async with open_postgres_store(
                args.store, schema=args.postgres_schema, pool_size=args.postgres_pool,
                max_ended_tasks=args.max_ended_tasks,
                max_ended_bytes=getattr(args, "max_ended_bytes", 256 << 20),
                retain=getattr(args, "retain", None), key_file=args.postgres_key_file,
                sync_events=args.postgres_sync_events, lease=getattr(args, "lease", 10.0),
            ) as store:
                yield store
                return
        except ValueError as exc:  # a bad schema name
            raise StartupError(f"--postgres-schema: {exc}") from None
        except StoreOpenError as exc:
            text = str(exc)
            unreachable = "cannot be reached" in text
            if not unreachable or anyio.current_time() >= deadline:
                waited = (f" (waited --store-wait {args.store_wait:g}s)"
                          if unreachable and args.store_wait else "")
                raise StartupError(f"--store: {text}{waited}") from None
        with anyio.move_on_after(min(0.5, max(deadline - anyio.current_time(), 0))):
            await shutdown.wait()
        if shutdown.is_set():
            yield None
            return


async def serve(args: argparse.Namespace, make_app: Callable[..., Any],
                shutdown: anyio.Event) -> None:
    """``serve`` with tasks in PostgreSQL, plus a worker unless ``--no-worker``, until
    ``shutdown`` is set and the app has drained. Raises StartupError (one line) when the
    database cannot be used. Cancelled: stops at once; queued runs stay queued."""
    from ..runtime.durable_worker import Worker

    async with _open(args, shutdown) as store:
        if store is None:
            return
        async with anyio.create_task_group() as nursery:
            # The server nursery is opened here so the worker can start runs in it at once.
            app = make_app(store, nursery)
            # Push watches left by stopped processes are adopted by the app's push service
            # (store/push_watches.py), not resumed from pending_pushes by every replica.
            if not args.no_worker:
                worker = Worker(store.queue, app.runner, concurrency=args.concurrency,
                                claim_idle=args.claim_idle)
                nursery.start_soon(worker.run)
            await listen(args, app, shutdown)
            nursery.cancel_scope.cancel()


async def run_worker(args: argparse.Namespace, agent: Any, shutdown: anyio.Event) -> None:
    """Execute queued runs until ``shutdown`` is set, then give them ``--grace`` seconds and
    leave the rest in the queue. StartupError when the database cannot be used. Cancelled:
    stops at once (the runs stay queued)."""
    from .queue_work import work_on_queue


    async with _open(args, shutdown) as store:
        if store is None:
            return
        await work_on_queue(args, agent, store, shutdown)
