"""The command line's durable stores: ``serve --store redis://...`` and the ``worker`` command,
and the dispatch of ``serve --store sqlite:PATH`` to :mod:`.sqlite_cli`.

Kept apart from :mod:`.cli` so the in-memory default never imports the Redis client; coredis
is only imported once a Redis URL is given (``pip install 'scoped-a2a[redis]'``).

``serve --store redis://...`` keeps tasks in Redis, queues detached runs durably, and runs a
worker in its own server nursery unless ``--no-worker``. ``worker --store redis://...`` runs
only a worker. Both shut down like ``serve``: the first SIGINT/SIGTERM stops taking new work and
gives runs ``--grace`` seconds; runs still going then are left in the queue for another worker
(they record nothing); a second signal stops at once.

Both check that Redis answers before they start: if it does not (within ``--store-wait``
seconds, none by default), they stop with one line and exit status 2 rather than serve a store
nobody can reach.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from ..agent_loading import DEFAULT_AGENT
from ..runtime.policy import RunPolicy
from .arg_types import at_least_one, seconds, seconds_or_zero
from .auth_options import tls_from_args
from .help import HelpFormatter, StartupError, add_log_level
from .store_sqlite import serve_on_sqlite, sqlite_path

log = logging.getLogger("scoped_a2a.cli")

PING_TIMEOUT = 2.0
"""Seconds one start-up PING of Redis may take."""

OnSignals = Callable[..., Coroutine[Any, Any, None]]
"""``on_signals(shutdown, scope)``, run with ``TaskGroup.start``: started once its signal
handlers are installed."""


def add_store_options(parser: argparse.ArgumentParser, *, worker: bool = False) -> None:
    """The options of ``serve`` (``worker=False``) or ``worker`` about the store and the queue."""
    if worker:
        parser.add_argument("--store", required=True, metavar="redis://HOST:PORT/DB",
                            help="the Redis the servers use")
    else:
        parser.add_argument("--store", default="memory",
                            metavar="memory|sqlite:PATH|redis://HOST:PORT/DB",
                            help="where tasks live: in memory, in an SQLite file (one process; "
                                 "survives restarts) or in a shared Redis; both make detached "
                                 "runs durable (docs/stores.md)")
        parser.add_argument("--no-worker", action="store_true",
                            help="with a Redis store: do not execute queued runs in this process")
        parser.add_argument("--retain", type=seconds, default=None, metavar="SECONDS",
                            help="with an SQLite store: delete ended tasks older than this (and "
                                 "beyond --max-ended-tasks / --max-ended-bytes, oldest first)")
    parser.add_argument("--store-wait", type=seconds_or_zero, default=0.0, metavar="SECONDS",
                        help="with a Redis store: wait up to this long for Redis to answer at "
                             "start-up (0: it must answer at once); then stop with exit status 2")
    parser.add_argument("--concurrency", type=at_least_one, default=16, metavar="N",
                        help="queued runs one worker executes at a time")
    parser.add_argument("--claim-idle", type=seconds, default=30.0, metavar="SECONDS",
                        help="a queued run whose worker is silent this long goes to another "
                             "worker")
    parser.add_argument("--redis-prefix", default="scoped_a2a",
                        help="prefix of every Redis key (apps sharing one Redis differ here)")


def add_worker_command(sub: Any) -> None:
    """The ``worker`` subcommand."""
    w = sub.add_parser(
        "worker", help="execute queued detached runs from a Redis store",
        formatter_class=HelpFormatter,
        description="Execute the detached runs that `serve --store redis://...` queued, with "
                    "no HTTP server.\nRun as many workers as you like against one Redis. "
                    "SIGINT/SIGTERM: take no new runs, give\nrunning ones --grace seconds, "
                    "then leave the rest in the queue for another worker.")
    w.add_argument("--agent", default=DEFAULT_AGENT,
                   help="MODULE:ATTR of the agent, an async callable (the default is the "
                        "built-in demo agent)")
    w.add_argument("--backend", choices=["trio", "asyncio"], default="trio",
                   help="the async library to run on")
    w.add_argument("--grace", type=seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="seconds runs get to finish on shutdown before they are left for "
                        "another worker")
    w.add_argument("--max-ended-tasks", type=at_least_one, default=10_000, metavar="N",
                   help="ended tasks kept in Redis (oldest evicted first)")
    w.add_argument("--expose-errors", action="store_true",
                   help="send the full text of an agent's exceptions to callers (development)")
    add_log_level(w, "INFO")
    add_store_options(w, worker=True)


def check_store_url(url: str) -> None:
    """SystemExit with one line unless ``url`` is an SQLite store (``sqlite:PATH``) or a Redis
    URL with the redis extra installed (called before the event loop starts)."""
    if url.startswith("sqlite:"):
        sqlite_path(url)  # a missing path is one line
        return
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise SystemExit(f"--store must be 'memory', sqlite:PATH or a redis:// URL, not {url!r}")
    # coredis logs each (expected) script reload at INFO: keep the run log readable.
    logging.getLogger("coredis").setLevel(logging.WARNING)
    try:
        import coredis  # noqa: F401
    except ImportError:
        raise SystemExit(
            "the Redis store needs coredis: pip install 'scoped-a2a[redis]'"
        ) from None


async def wait_for_redis(store: Any, wait: float) -> None:
    """Return once Redis answers a PING; StartupError if it has not within ``wait`` seconds
    (one try when ``wait`` is 0). Cancellation ends the wait at once."""
    from coredis.exceptions import RedisError

    conn = store.conn
    deadline = anyio.current_time() + wait
    while True:
        try:
            with anyio.fail_after(PING_TIMEOUT):
                await conn.client.ping()
            return
        except (RedisError, OSError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
        left = deadline - anyio.current_time()
        if left <= 0:
            break
        await anyio.sleep(min(0.25, left))
    waited = f" within --store-wait {wait:g}s" if wait else ""
    raise StartupError(
        f"Redis at {conn.url} does not answer{waited} ({reason}); start it, check --store, or "
        "give --store-wait SECONDS to wait for it")


async def serve_on_redis(
    args: argparse.Namespace, make_app: Callable[..., Any], on_signals: OnSignals
) -> None:
    """``serve`` with tasks in Redis, plus a worker unless ``--no-worker``.

    ``make_app(store, detached)`` builds the app as ``serve`` configured it. ``--store`` was
    checked (``check_store_url``) before the loop started. Raises StartupError when Redis does
    not answer within ``--store-wait`` (before anything listens). An ``sqlite:PATH`` store is
    served by :func:`.sqlite_cli.serve_on_sqlite` instead.
    """
    if sqlite_path(args.store) is not None:
        await serve_on_sqlite(args, make_app, on_signals)
        return
    from ..runtime.durable_worker import Worker
    from ..server.serve import serve
    from ..store.redis import open_redis_store

    async with open_redis_store(
        args.store, prefix=args.redis_prefix, max_ended_tasks=args.max_ended_tasks
    ) as store:
        await wait_for_redis(store, args.store_wait)
        async with anyio.create_task_group() as nursery:
            # The server nursery is opened here so the worker can start runs in it at once.
            app = make_app(store, nursery)
            shutdown = anyio.Event()
            await nursery.start(on_signals, shutdown, nursery.cancel_scope)
            if not args.no_worker:
                worker = Worker(store.queue, app.runner, concurrency=args.concurrency,
                                claim_idle=args.claim_idle)
                nursery.start_soon(worker.run)
            await serve(app, host=args.host, port=args.port, shutdown=shutdown,
                        grace=args.grace, http2=args.http2, gc_tuning=not args.no_gc_tuning,
                        **tls_from_args(args))
            nursery.cancel_scope.cancel()


async def run_worker(args: argparse.Namespace, agent: Any, on_signals: OnSignals) -> None:
    """The ``worker`` command: execute queued runs until a signal, then drain. ``--store`` was
    checked (``check_store_url``) before the loop started. Raises StartupError when Redis does
    not answer within ``--store-wait``."""
    from ..runtime.durable_worker import Worker
    from ..runtime.runner import Runner
    from ..store.redis import open_redis_store

    if sqlite_path(args.store) is not None:
        raise StartupError("an SQLite store is executed by its serve process (one process owns "
                           "the file); the worker command is for a redis:// store")

    async with open_redis_store(
        args.store, prefix=args.redis_prefix, max_ended_tasks=args.max_ended_tasks
    ) as store:
        await wait_for_redis(store, args.store_wait)
        async with anyio.create_task_group() as nursery:
            runner = Runner(agent, store, RunPolicy(), launcher=store.run_launcher(),
                            expose_errors=args.expose_errors)
            runner.attach(nursery)
            shutdown = anyio.Event()
            await nursery.start(on_signals, shutdown, nursery.cancel_scope)
            worker = Worker(store.queue, runner, concurrency=args.concurrency,
                            claim_idle=args.claim_idle)
            nursery.start_soon(worker.run)
            await shutdown.wait()
            try:
                await runner.shutdown(args.grace)
            finally:
                runner.cancel_all("shutdown")
                nursery.cancel_scope.cancel()
