"""Tasks and durable detached runs on a shared Redis (``pip install scoped-a2a[redis]``).

::

    async with open_redis_store("redis://localhost:6379/0") as store:
        app = A2AApp(agent, store=store)          # detached runs go to the durable queue
        async with anyio.create_task_group() as tg:
            tg.start_soon(Worker(store.queue, app.runner).run)   # or: python -m scoped_a2a worker

(``Worker`` is :class:`scoped_a2a.runtime.durable_worker.Worker`, the one worker of every
durable queue.)
            await serve(app)

Modules: :mod:`.connection` (client, keys, listener), :mod:`.store` (the TaskStore),
:mod:`.queue` (the run queue), :mod:`.scripts` (the Lua).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from ..claims import DEFAULT_CLAIM_WINDOW
from ..liveness import DEFAULT_LEASE, keep_alive, retire
from .connection import RedisConnection
from .queue import RunQueue
from .store import RedisTaskStore


@asynccontextmanager
async def open_redis_store(
    url: str,
    *,
    prefix: str = "scoped_a2a",
    max_events_per_task: int = 10_000,
    max_ended_tasks: int = 10_000,
    ended_ttl: float = 7 * 86400.0,
    durable_runs: bool = True,
    claim_window: float = DEFAULT_CLAIM_WINDOW,
    lease: float = DEFAULT_LEASE,
) -> AsyncIterator[RedisTaskStore]:
    """A Redis task store connected to ``url`` for the ``async with`` body.

    Does not wait for Redis: until it is reachable, store calls raise ServerUnavailable.
    ``claim_window``: seconds a message claim outlives its ended task at least
    (docs/exactly-once.md). ``lease``: this process's liveness lease over its interactive
    runs (store/liveness.py): renewed every third of it while the body runs; other processes
    record its runs lost once it lapses. The body also records the runs of lapsed processes.
    """
    async with RedisConnection.open(url, prefix=prefix) as conn:
        store = RedisTaskStore(
            conn, max_events_per_task=max_events_per_task, max_ended_tasks=max_ended_tasks,
            ended_ttl=ended_ttl, durable_runs=durable_runs, claim_window=claim_window,
            lease=lease,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_alive, store, store.leases, name="scoped_a2a liveness lease")
            try:
                yield store
            finally:
                tg.cancel_scope.cancel()
                await retire(store.leases, renewed=store.leases.renewed)


__all__ = ["RedisConnection", "RedisTaskStore", "RunQueue", "open_redis_store"]
