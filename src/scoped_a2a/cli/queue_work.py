"""The body of the ``worker`` command on a shared store (Redis or PostgreSQL): one piece, which
each store's module calls once it has opened its store (:func:`.store_redis.run_worker`,
:func:`.store_postgres.run_worker`)."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from typing import Any

import anyio

from .serve_options import push_settings


async def work_on_queue(args: argparse.Namespace, agent: Any, store: Any,
                        shutdown: anyio.Event) -> None:
    """Execute ``store``'s queued runs (a shared store: Redis or PostgreSQL) until ``shutdown``
    is set, serving hand-overs and adopting push watches meanwhile (unless ``--no-push``); then
    give the runs ``--grace`` seconds, cancel the rest and record them (their queue entries stay
    for another worker), then give push deliveries in flight ``--grace`` seconds and hand the
    remaining watches to another process. Cancelled: stops at once, the runs stay queued (and
    the watches go to another process once this one's lease lapses)."""
    from ..push import PushService
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
        # Push watches a stopped process left are adopted here too (push/fleet.py): without
        # it a fleet of workers alone would deliver no push. They drain after the runs, whose
        # last states are deliveries too (as in A2AApp.running).
        push = None if args.no_push else PushService(store, push_settings(args))
        # A queued run parked in ctx.ask here gets its answer from any server.
        async with (
            push.serving(nursery, grace=args.grace) if push is not None else nullcontext(),
            Handovers(runner, store, store.handover).serving(nursery),
        ):
            await shutdown.wait()
            try:
                await runner.shutdown(args.grace)
            finally:
                runner.cancel_all("shutdown")
        nursery.cancel_scope.cancel()
