"""A follower cancelled in the same tick as its turn ends makes no further read.

The turn's end sets ``stop``, which wakes a follower pausing between reads; the step's
cancellation lands in the same tick. Cancellation is delivered at the next checkpoint, and a
read's first checkpoint may come after its request was written: the follower must check first.
(Found running a step in a Temporal activity: tests/test_temporal.py.)
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import pytest

from scoped_a2a.client import Follower, LivePage

pytestmark = pytest.mark.anyio


class Source:
    def __init__(self) -> None:
        self.calls = 0

    async def offers_trajectory(self) -> bool:
        return True

    async def read_trajectory(self, task_id: str, after: int = 0, *,
                              max_events: int | None = None,
                              max_bytes: int | None = None) -> LivePage:
        self.calls += 1  # the request would be on its way now
        await anyio.sleep(0)
        return LivePage(task_id, after, after, [], None)

    def subscribe(self, task_id: str, *,
                  last_event_id: int | None = None) -> AbstractAsyncContextManager[Any]:
        raise AssertionError("not used")


async def test_no_read_after_cancel_in_the_tick_the_turn_ended() -> None:
    source = Source()

    async def sink(page: LivePage) -> None:
        pass

    follower = Follower(source, "t1", sink, mode="read", poll_interval=60)
    async with anyio.create_task_group() as tg:
        tg.start_soon(follower.run)
        with anyio.fail_after(5):
            while source.calls < 1:  # the first read is done; now it pauses on ``stop``
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        calls = source.calls
        follower.stop.set()
        tg.cancel_scope.cancel()
    assert follower.outcome == "cancelled"
    assert source.calls == calls
