"""Scenario 8's Temporal side: one workflow, two step activities (scoped-a2a's ActivityStep,
and the old follower pattern of :mod:`benchmarks.oldstep` in an activity), and what this
process sees of them. Imported only when scenario 8 runs (it needs ``temporalio``)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from temporalio import activity, workflow
from temporalio.common import RetryPolicy

from scoped_a2a import A2AClient
from scoped_a2a.client import LivePage, TransportError
from scoped_a2a.temporal import ActivityStep

from .oldstep import OldStats, old_step


@dataclass
class Req:
    pattern: str  # scoped | old
    url: str
    text: str
    heartbeat_timeout: float


@dataclass
class Seen:
    """One activity as the benchmark sees it."""

    started: float = field(default_factory=time.monotonic)
    following: bool = False
    returned_at: float | None = None
    cancelled_at: float | None = None
    step: ActivityStep | None = None
    old: OldStats | None = None
    reads: list[float] = field(default_factory=list)  # starts of the scoped follower's reads


SEEN: dict[str, Seen] = {}


class _CountingClient(A2AClient):
    """Notes when each trajectory read starts (exact, unlike an arrival seen at the agent)."""

    def __init__(self, url: str, reads: list[float]) -> None:
        super().__init__(url, rpc_url=url)  # stay behind the fault proxy, whatever the card says
        self._reads = reads

    async def read_trajectory(self, task_id: str, after: int = 0, **kw: Any) -> LivePage:
        self._reads.append(time.monotonic())
        return await super().read_trajectory(task_id, after, **kw)


async def _heartbeat(every: float) -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(every)


def _workflow_id() -> str:
    workflow_id = activity.info().workflow_id
    assert workflow_id is not None  # these activities run only inside the benchmark's workflow
    return workflow_id


@activity.defn
async def scoped_step(req: Req) -> str:
    seen = SEEN[_workflow_id()] = Seen()
    try:
        async with _CountingClient(req.url, seen.reads) as client, \
                ActivityStep(client, poll_interval=0.2) as step:
            seen.step = step
            try:
                await step.turn(req.text)
            except TransportError:
                return "agent gone"
        return "ended"
    except asyncio.CancelledError:
        seen.cancelled_at = step.cancelled_at if seen.step is not None else time.monotonic()
        raise
    finally:
        seen.returned_at = time.monotonic()


@activity.defn
async def old_pattern_step(req: Req) -> str:
    """The old pattern, heartbeating like the scoped one (so a cancel reaches it the same way)."""
    seen = SEEN[_workflow_id()] = Seen(old=OldStats())
    assert seen.old is not None
    beats = asyncio.create_task(_heartbeat(req.heartbeat_timeout / 3))
    started = asyncio.Event()
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            await old_step(http, req.url, req.text, "returns", seen.old, started)
        return "ended"
    except asyncio.CancelledError:
        seen.cancelled_at = time.monotonic()
        raise
    finally:
        beats.cancel()
        seen.returned_at = time.monotonic()


@workflow.defn
class StepActivity:
    @workflow.run
    async def run(self, req: Req) -> str:
        fn = scoped_step if req.pattern == "scoped" else old_pattern_step
        return await workflow.execute_activity(
            fn, req, start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(seconds=req.heartbeat_timeout),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
