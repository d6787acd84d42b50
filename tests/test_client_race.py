"""The race that broke the old follower: stop and cancel in the same tick, many times.

The old step set ``stop`` and cancelled its follower in the same loop tick; Python 3.11's
``asyncio.wait_for`` swallowed the cancel when it landed as the read completed, the follower kept
looping, and after ``stop`` a failed read retried forever. Here the same tick is hit at many
phases of the follower (mid-read, mid-pause, mid-backoff, draining), on asyncio (3.11 in the
local run, 3.13 in CI) and trio: every time, the follower ends and the step ends.
"""

from __future__ import annotations

import os
import random

import anyio
import pytest

from scoped_a2a import A2AApp, A2AClient, Step
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.client import Backoff, Follower, MemorySink
from scoped_a2a.runtime.context import RunContext
from scoped_a2a.testing import faulty_agent

from .client_helpers import assert_no_followers_left
from .helpers import served

pytestmark = pytest.mark.anyio

ROUNDS = int(os.environ.get("SCOPED_A2A_RACE_ROUNDS", "100"))


async def quick_agent(ctx: RunContext) -> str:
    for i in range(3):
        await ctx.trajectory({"i": i})
    return "ok"


async def test_step_ends_when_stop_and_cancel_share_a_tick() -> None:
    rng = random.Random(1)
    async with served(A2AApp(quick_agent)) as url, A2AClient(url) as client:
        for i in range(ROUNDS):
            with anyio.fail_after(5):  # the step always ends
                with anyio.CancelScope() as scope:
                    async with Step(client, poll_interval=0.001, drain_timeout=5) as step:
                        await step.turn(f"round {i}")  # sets the follower's stop...
                        for _ in range(rng.choice([0, 0, 1, 2, 3])):
                            await anyio.lowlevel.checkpoint()
                        scope.cancel()  # ...and the step is cancelled in the same tick
                        if i % 2:
                            await anyio.lowlevel.checkpoint()  # delivered in the body
                        # else: delivered in the step's drain
                assert scope.cancelled_caught
            assert_no_followers_left()
            assert step.turns[0].follower is not None
            assert step.turns[0].follower.done.is_set()


@pytest.mark.parametrize("fault", [None, "500"])
async def test_follower_ends_when_stop_and_cancel_share_a_tick(fault: str | None) -> None:
    """A follower of a running task, read by a healthy agent or one failing every read."""
    rng = random.Random(2)
    async with faulty_agent(demo_agent, fault) as (url, _proxy, _app), A2AClient(url) as client:
        task = await client.send("slow 30", return_immediately=True)
        for _ in range(ROUNDS):
            follower = Follower(client, task.id, MemorySink().turn("x"), poll_interval=0.002,
                                backoff=Backoff(initial=0.002, cap=0.01), mode="read")
            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(follower.run)
                    await anyio.sleep(rng.uniform(0, 0.01))
                    follower.stop.set()
                    tg.cancel_scope.cancel()
            assert follower.done.is_set() and not follower.running
            assert follower.failed_reads_after_stop <= 1
        assert_no_followers_left()
        await client.cancel(task.id)
