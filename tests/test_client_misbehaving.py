"""Steps against agents that misbehave as real ones do, over real HTTP, on asyncio and trio.

For each misbehaviour (closes every connection; answers 500 to every trajectory read; hangs
without answering; forgets the task (404); vanishes mid-turn) and each way a step ends (cancelled,
its body raises, its body returns): the step ends promptly, the follower makes at most one failed
read after the turn ended, no follower task is left running, and every turn's end is recorded.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import anyio
import pytest

from scoped_a2a import A2AClient, MemorySink, Step
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.client import TransportError
from scoped_a2a.protocol.types import TaskState
from scoped_a2a.testing import faulty_agent

from .client_helpers import QUICK, assert_no_followers_left

pytestmark = pytest.mark.anyio

PROMPT = 3.0  # seconds: "ends promptly" (drain_timeout is 1 s; typical is a few ms)


async def run_step(url: str, ending: str, *, vanish: Any = None, mode: str = "auto",
                   before_cancel: Any = None,
                   ) -> tuple[dict[str, float], Step, MemorySink]:
    """Run one step that ends as ``ending``; return its timeline, the step and its sink.
    ``before_cancel(step)``: awaited before a ``cancelled`` step is cancelled (a condition
    the test needs first, however slow the machine)."""
    times: dict[str, float] = {}
    sink = MemorySink()
    box: list[Step] = []
    started = anyio.Event()  # the turn's task exists (its follower has been started)

    async def turn(step: Step, text: str) -> None:
        try:
            await step.turn(text, on_event=lambda _: started.set())
        finally:
            times["turn_end"] = anyio.current_time()

    # An agent that vanishes does so mid-turn however slow the machine is: its turn is long
    # (it fails at the vanishing anyway).
    short = "slow 5" if vanish is not None else "slow 0.15"

    async def body() -> None:
        try:
            async with A2AClient(url, timeout=2.0) as client, Step(
                client, sink=sink, mode=mode, **QUICK  # type: ignore[arg-type]
            ) as step:
                box.append(step)
                if ending == "cancelled":
                    with suppress(TransportError):  # long: it is cancelled mid-turn however
                        await turn(step, "slow 5")  # slow the machine (it costs no time)
                    await anyio.sleep_forever()
                elif ending == "raises":
                    try:
                        await turn(step, short)
                    except TransportError:
                        times["t0"] = anyio.current_time()
                        raise
                    times["t0"] = anyio.current_time()
                    raise RuntimeError("the body failed")
                else:
                    with suppress(TransportError):
                        await turn(step, short)
                    times["t0"] = anyio.current_time()
        finally:
            times["end"] = anyio.current_time()

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def run() -> None:
                with scope, suppress(RuntimeError, TransportError):
                    await body()

            tg.start_soon(run)
            await started.wait()
            if vanish is not None:
                await anyio.sleep(0.05)
                vanish()
            if ending == "cancelled":
                await anyio.sleep(0.1)
                if before_cancel is not None:
                    await before_cancel(box[0])
                times["t0"] = anyio.current_time()
                scope.cancel()
    return times, box[0], sink


def check(times: dict[str, float], step: Step, sink: MemorySink) -> None:
    assert times["end"] - times["t0"] < PROMPT
    assert_no_followers_left()
    assert step.turns, "the turn never started"
    for turn in step.turns:
        if turn.follower is not None:
            assert not turn.follower.running
            assert turn.follower.failed_reads_after_stop <= 1
        end = sink.turns[turn.id].end
        assert end is not None, "a turn's end was not recorded: a reader would wait forever"
        assert end["state"] is not None and TaskState(end["state"]).terminal
    assert sink.order()[-1].linked and sink.order()[-1].next is None


@pytest.mark.parametrize("ending", ["cancelled", "raises", "returns"])
@pytest.mark.parametrize("fault", ["close", "500", "hang", "404"])
async def test_follower_reads_fail(fault: str, ending: str) -> None:
    async def follower_ended(step: Step) -> None:
        # The 404 ends following at the first read; a loaded machine may take longer than the
        # 0.1 s before the cancel to make it (seen in CI: the follower was cancelled first).
        while not (step.turns and step.turns[0].follower is not None
                   and step.turns[0].follower.done.is_set()):
            await anyio.sleep(0.01)

    async with faulty_agent(demo_agent, fault) as (url, proxy, _app):
        times, step, sink = await run_step(
            url, ending, before_cancel=follower_ended if fault == "404" else None)
    check(times, step, sink)
    # Counted on the agent's side too: at most one read reached it after the turn ended.
    assert proxy.requests_after(times["turn_end"]) <= 1
    follower = step.turns[0].follower
    assert follower is not None and follower.mode == "read"
    if fault == "404":
        assert follower.outcome == "task-gone"
        assert len(proxy.faulty_requests) == 1  # the agent forgot the task: no retry
    elif ending != "cancelled":
        # (A hanging read is still in flight when a raising body cancels it: not failed yet.)
        assert follower.failed_reads >= 1 or (fault == "hang" and ending == "raises")
        assert sink.turns["0001"].end == {"state": "TASK_STATE_COMPLETED",
                                          "next": follower.cursor}
    if ending == "cancelled":
        assert sink.turns["0001"].end is not None
        assert sink.turns["0001"].end["state"] == "TASK_STATE_CANCELED"


@pytest.mark.parametrize("ending", ["cancelled", "raises", "returns"])
async def test_agent_vanishes_mid_turn(ending: str) -> None:
    async with faulty_agent(demo_agent, None) as (url, proxy, _app):
        times, step, sink = await run_step(url, ending, vanish=proxy.vanish)
    check(times, step, sink)
    follower = step.turns[0].follower
    assert follower is not None
    assert follower.outcome in ("read-failed", "cancelled")
    # The turn saw no end: it is recorded failed (it raised), or canceled with the step.
    assert sink.turns["0001"].end is not None
    assert sink.turns["0001"].end["state"] in ("TASK_STATE_FAILED", "TASK_STATE_CANCELED")


NO_EXTENSION = {"capabilities": {"extensions": []}}


@pytest.mark.parametrize("ending", ["cancelled", "raises", "returns"])
@pytest.mark.parametrize("fault", ["close", "vanish"])
async def test_subscription_follower_fails(fault: str, ending: str) -> None:
    """Where the card offers no trajectory extension, followers subscribe (SSE) instead."""
    async with faulty_agent(demo_agent, None if fault == "vanish" else fault,
                            card=NO_EXTENSION) as (url, proxy, _app):
        times, step, sink = await run_step(
            url, ending, vanish=proxy.vanish if fault == "vanish" else None)
    check(times, step, sink)
    follower = step.turns[0].follower
    assert follower is not None and follower.mode == "subscribe"
    if fault == "close":
        assert proxy.requests_after(times["turn_end"]) <= 1
