"""The body of the ``worker`` command on a shared store (Redis or PostgreSQL): one piece, which
each store's module calls once it has opened its store (:func:`.store_redis.run_worker`,
:func:`.store_postgres.run_worker`)."""

from __future__ import annotations

import argparse
from typing import Any

import anyio


async def work_on_queue(args: argparse.Namespace, agent: Any, store: Any,
                        shutdown: anyio.Event) -> None:
    """Execute ``store``'s queued runs (a shared store: Redis or PostgreSQL) until ``shutdown``
    is set, serving hand-overs meanwhile; then give the runs ``--grace`` seconds, cancel the
    rest and record them (their queue entries stay for another worker). Cancelled: stops at
    once, the runs stay queued."""
    from ..runtime.durable_worker import Worker
    from ..runtime.handover import Handovers
    from ..runtime.policy import RunPolicy
    from ..runtime.runner import Runner

    async with anyio.create_task_group() as nursery:
        runner = Runner(agent, store, RunPolicy(), launcher=store.run_launcher(),
                        expose_errors=args.expose_errors)
        runner.attach(nursery)
        worker = Worker(store.queue, runner, concurrency=args.concurrency,
                        claim_idle=args.claim_idle)
        nursery.start_soon(worker.run)
        # A queued run parked in ctx.ask here gets its answer from any server.
        async with Handovers(runner, store, store.handover).serving(nursery):
            await shutdown.wait()
            try:
                await runner.shutdown(args.grace)
            finally:
                runner.cancel_all("shutdown")
        nursery.cancel_scope.cancel()
