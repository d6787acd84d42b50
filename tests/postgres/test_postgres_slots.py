"""The pool's bound on operations at once (store/postgres/slots.py), on asyncio and trio: never
more holders than slots, FIFO when full, and no slot lost or doubled by a cancellation, in the
queue or at the moment a slot is handed over. No database needed."""

from __future__ import annotations

import anyio
import pytest

from scoped_a2a.store.postgres.slots import Slots

pytestmark = pytest.mark.anyio


async def test_at_most_size_hold_and_waiters_are_served_in_order() -> None:
    slots = Slots(2)
    holding, most, order = 0, 0, []
    release = [anyio.Event() for _ in range(6)]

    async def hold(i: int) -> None:
        nonlocal holding, most
        async with slots:
            holding += 1
            most = max(most, holding)
            order.append(i)
            await release[i].wait()
            holding -= 1

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(hold, i)
                await anyio.wait_all_tasks_blocked()
            assert (holding, order, slots.free) == (2, [0, 1], 0)
            for i in range(4):  # each release lets in the longest waiter
                release[i].set()
                await anyio.wait_all_tasks_blocked()
                assert order == list(range(i + 3)), order
            release[4].set()
            release[5].set()
    assert (most, order, slots.free) == (2, list(range(6)), 2)


async def test_cancelled_callers_take_nothing_and_a_handed_slot_passes_on() -> None:
    slots = Slots(1)
    # Already cancelled: raises at once, holding nothing.
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with slots:
            raise AssertionError("entered a cancelled caller")
    assert slots.free == 1
    got: list[str] = []

    async def wait(name: str, scope: anyio.CancelScope) -> None:
        with scope:
            async with slots:
                got.append(name)

    first, second, third = anyio.CancelScope(), anyio.CancelScope(), anyio.CancelScope()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await slots.__aenter__()  # held here
            tg.start_soon(wait, "first", first)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(wait, "second", second)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(wait, "third", third)
            await anyio.wait_all_tasks_blocked()
            second.cancel()  # leaves the queue while waiting
            await anyio.wait_all_tasks_blocked()
            # "first" is cancelled and then handed the slot before it runs again: it wakes
            # cancelled, holding a slot it must pass on to "third" (kept, the slot would be
            # lost; taken off the queue again, the release would fail).
            first.cancel()
            await slots.__aexit__(None, None, None)
    assert got == ["third"] and slots.free == 1, (got, slots.free)
