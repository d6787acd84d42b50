"""``serve --store redis://...``: tasks in a shared Redis, detached runs queued durably
(docs/redis.md). The ``worker`` command (:mod:`.worker`) runs the queue alone.

coredis is imported only once a Redis URL is given (``pip install 'scoped-a2a[redis]'``).
``serve`` runs a worker in its own server nursery unless ``--no-worker``. On shutdown, runs
still going after ``--grace`` are left in the queue for another worker (they record nothing).

Redis must answer before anything starts: if it does not (within ``--store-wait`` seconds, none
by default) the command stops with one line and exit status 2 rather than serve a store nobody
can reach; a shutdown signal during that wait ends it (exit 0, nothing was served).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import anyio

from ..timeouts import fail_after
from .help import StartupError
from .startup import listen

PING_TIMEOUT = 2.0
"""Seconds one start-up PING of Redis may take."""


def check(url: str) -> None:
    """SystemExit with one line unless the redis extra is installed (called before the event
    loop starts)."""
    # coredis logs each (expected) script reload at INFO: keep the run log readable.
    logging.getLogger("coredis").setLevel(logging.WARNING)
    try:
        import coredis  # noqa: F401
    except ImportError:
        raise SystemExit(
            "the Redis store needs coredis: pip install 'scoped-a2a[redis]'"
        ) from None


async def wait_for_redis(store: Any, wait: float, shutdown: anyio.Event) -> bool:
    """True once Redis answers a PING; False if ``shutdown`` was set first; StartupError if it
    has not answered within ``wait`` seconds (one try when ``wait`` is 0). Cancellation ends
    the wait at once."""
    from coredis.exceptions import RedisError

    conn = store.conn
    deadline = anyio.current_time() + wait
    while not shutdown.is_set():
        try:
            with fail_after(PING_TIMEOUT):
                await conn.client.ping()
            return True
        except (RedisError, OSError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
        left = deadline - anyio.current_time()
        if left <= 0:
            waited = f" within --store-wait {wait:g}s" if wait else ""
            raise StartupError(
                f"Redis at {conn.url} does not answer{waited} ({reason}); start it, check "
                "--store, or give --store-wait SECONDS to wait for it")
        await anyio.sleep(min(0.25, left))
    return False


async def serve(args: argparse.Namespace, make_app: Any, shutdown: anyio.Event) -> None:
    """``serve`` with tasks in Redis, plus a worker unless ``--no-worker``, until ``shutdown``
    is set and the app has drained.

    ``make_app(store, detached)`` builds the app as ``serve`` configured it. ``--store`` was
    checked (:func:`check`) before the loop started. Raises StartupError when Redis does not
    answer within ``--store-wait`` (before anything listens). Cancelled: stops at once; queued
    runs stay queued.
    """
    from ..runtime.durable_worker import Worker
    from ..store.redis import open_redis_store

    async with open_redis_store(
        args.store, prefix=args.redis_prefix, max_ended_tasks=args.max_ended_tasks,
        lease=args.lease,
    ) as store:
        if not await wait_for_redis(store, args.store_wait, shutdown):
            return
        async with anyio.create_task_group() as nursery:
            # The server nursery is opened here so the worker can start runs in it at once.
            app = make_app(store, nursery)
            if not args.no_worker:
                worker = Worker(store.queue, app.runner, concurrency=args.concurrency,
                                claim_idle=args.claim_idle)
                nursery.start_soon(worker.run)
            await listen(args, app, shutdown)
            nursery.cancel_scope.cancel()


async def run_worker(args: argparse.Namespace, agent: Any, shutdown: anyio.Event) -> None:
    """Execute queued runs until ``shutdown`` is set, then give them ``--grace`` seconds and
    leave the rest in the queue. Raises StartupError when Redis does not answer within
    ``--store-wait``. Cancelled: stops at once (the runs stay queued)."""
    from ..store.redis import open_redis_store
    from .queue_work import work_on_queue

    async with open_redis_store(
        args.store, prefix=args.redis_prefix, max_ended_tasks=args.max_ended_tasks,
        lease=args.lease,
    ) as store:
        if not await wait_for_redis(store, args.store_wait, shutdown):
            return
        await work_on_queue(args, agent, store, shutdown)
