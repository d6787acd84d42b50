"""A Temporal workflow + activity running a scoped-a2a step, instrumented for
tests/test_temporal.py; ``python -m tests.temporal_app worker ADDRESS QUEUE`` runs a worker in
its own process (the one a test SIGKILLs)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import FixedSizeSlotSupplier, UnsandboxedWorkflowRunner, Worker, WorkerTuner

from scoped_a2a import A2AClient, DirectorySink
from scoped_a2a.client import LivePage, TransportError
from scoped_a2a.protocol.types import Task
from scoped_a2a.temporal import ActivityStep, SlotLedger

DETACH_KEY = "scoped_a2a_test_detach"
"""The agent server is started with ``--detach-metadata`` of this key: a turn sent with it runs
on after its caller (a SIGKILLed worker) has gone."""


@dataclass
class StepRequest:
    agent_url: str
    message: str
    out: str
    poll_interval: float = 0.25
    heartbeat_timeout: float | None = 1.0  # None: none (the activity never times out for want
    #                                        of a heartbeat)
    attempts: int = 1
    detach: bool = False
    drain_timeout: float = 2.0
    heartbeat_every: float | None = None  # ActivityStep's default: a third of the timeout


@dataclass
class Attempt:
    """What the test process sees of one attempt run by a worker in this process."""

    step: ActivityStep | None = None
    reads: list[float] = field(default_factory=list)  # time.monotonic() of each trajectory read
    returned_at: float | None = None
    outcome: str | None = None


ATTEMPTS: dict[str, list[Attempt]] = {}
"""Attempts run in this process, by workflow id."""


class CountingClient(A2AClient):
    """An A2AClient that notes the time of every trajectory read it starts."""

    def __init__(self, url: str, reads: list[float], **kw: Any) -> None:
        super().__init__(url, **kw)
        self._reads = reads

    async def read_trajectory(self, task_id: str, after: int = 0, **kw: Any) -> LivePage:
        self._reads.append(time.monotonic())
        return await super().read_trajectory(task_id, after, **kw)


@activity.defn
async def run_step(req: StepRequest) -> str:
    attempt = Attempt()
    ATTEMPTS.setdefault(activity.info().workflow_id, []).append(attempt)
    try:
        # rpc_url: stay behind the URL given (a test proxy), whatever the card advertises.
        client = CountingClient(req.agent_url, attempt.reads, rpc_url=req.agent_url)
        step = ActivityStep(client, sink=DirectorySink(req.out, resume=True),
                            poll_interval=req.poll_interval, drain_timeout=req.drain_timeout,
                            heartbeat_every=req.heartbeat_every)
        async with client, step:
            attempt.step = step
            try:
                task = await step.turn(
                    req.message, metadata={DETACH_KEY: "1"} if req.detach else None)
            except TransportError as exc:  # the agent went away: the step drains and ends
                attempt.outcome = f"agent gone: {exc}"
                return attempt.outcome
        attempt.outcome = task.status.state.value if isinstance(task, Task) else "message"
        return attempt.outcome
    finally:
        attempt.returned_at = time.monotonic()


@workflow.defn
class StepWorkflow:
    @workflow.run
    async def run(self, req: StepRequest) -> str:
        return await workflow.execute_activity(
            run_step, req,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=(timedelta(seconds=req.heartbeat_timeout)
                               if req.heartbeat_timeout is not None else None),
            retry_policy=RetryPolicy(maximum_attempts=req.attempts,
                                     initial_interval=timedelta(milliseconds=100)),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )


@asynccontextmanager
async def worker(client: Client, queue: str, *, slots: int = 200, identity: str | None = None,
                 ledger: SlotLedger | None = None, heartbeat_throttle: float = 60.0) -> Any:
    """A worker for StepWorkflow/run_step whose activity slots are counted by ``ledger``.
    ``heartbeat_throttle``: the most seconds it holds an activity's heartbeat back (it holds
    them for 80% of the heartbeat timeout, or this long without one; Temporal's default: 30 s
    without, 60 s at most); a cancel reaches an activity only in the answer to a heartbeat."""
    ledger = ledger or SlotLedger(slots)
    tuner = WorkerTuner.create_composite(
        workflow_supplier=FixedSizeSlotSupplier(slots), activity_supplier=ledger,
        local_activity_supplier=FixedSizeSlotSupplier(4), nexus_supplier=FixedSizeSlotSupplier(4))
    w = Worker(client, task_queue=queue, workflows=[StepWorkflow], activities=[run_step],
               tuner=tuner, workflow_runner=UnsandboxedWorkflowRunner(),
               identity=identity or f"test-worker-{queue}", graceful_shutdown_timeout=timedelta(0),
               max_heartbeat_throttle_interval=timedelta(seconds=heartbeat_throttle),
               default_heartbeat_throttle_interval=timedelta(seconds=min(30, heartbeat_throttle)))
    async with w:
        yield ledger


async def _main(address: str, queue: str) -> None:
    client = await Client.connect(address)
    async with worker(client, queue, identity=f"subprocess-worker-{queue}"):
        print("worker ready", file=sys.stderr, flush=True)
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["worker"])
    parser.add_argument("address")
    parser.add_argument("queue")
    args = parser.parse_args()
    asyncio.run(_main(args.address, args.queue))
