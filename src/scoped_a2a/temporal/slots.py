"""``SlotLedger``: a worker's activity slots, counted where the worker itself counts them.

Temporal's worker asks its slot supplier for a slot before it polls for an activity, tells it
when the slot is used, and releases it once the activity's outcome has been handed to the worker
core: a released slot is one the worker can give to the next activity. The ledger is that
supplier (a fixed number of slots, like the default one) and keeps the record: how many slots are
in use now, and when each was used and released, so a test or a benchmark can read "every slot
is free" from the worker's own accounting instead of guessing from the activity's return.

Times are ``time.monotonic()`` seconds (the clock of asyncio's loop, where Temporal runs): the
worker core may call ``release_slot`` from outside the event loop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import anyio
from temporalio.worker import (
    ActivitySlotInfo,
    CustomSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
)


@dataclass
class SlotUse:
    """One activity's use of a slot."""

    activity_type: str
    used_at: float
    released_at: float | None = None


@dataclass
class _Permit(SlotPermit):
    use: SlotUse | None = field(default=None)


class SlotLedger(CustomSlotSupplier):
    """A fixed-size activity slot supplier that records every slot's use.

    Pass it as the activity supplier of ``WorkerTuner.create_composite(...)`` (the worker then
    takes its activity slot count from here, not from ``max_concurrent_activities``).

    :param slots: how many activities the worker may run at once.
    :param poll_interval: seconds between checks while every slot is taken (``reserve_slot``
        waits; cancelling it, as the worker does on shutdown, gives up the wait).
    """

    def __init__(self, slots: int, *, poll_interval: float = 0.005) -> None:
        if slots < 1:
            raise ValueError("a worker needs at least one activity slot")
        self.slots = slots
        self.poll_interval = poll_interval
        self.uses: list[SlotUse] = []
        self._reserved = 0
        self._lock = threading.Lock()  # the core may call release_slot from its own thread

    @property
    def in_use(self) -> int:
        """Slots running an activity now."""
        with self._lock:
            return sum(1 for u in self.uses if u.released_at is None)

    @property
    def last_release(self) -> float | None:
        """When the most recent slot was released (None: none yet)."""
        with self._lock:
            done = [u.released_at for u in self.uses if u.released_at is not None]
        return max(done) if done else None

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        while True:
            permit = self.try_reserve_slot(ctx)
            if permit is not None:
                return permit
            await anyio.sleep(self.poll_interval)

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        with self._lock:
            if self._reserved >= self.slots:
                return None
            self._reserved += 1
            return _Permit()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        if not isinstance(ctx.permit, _Permit) or not isinstance(ctx.slot_info, ActivitySlotInfo):
            return
        use = SlotUse(ctx.slot_info.activity_type, time.monotonic())
        with self._lock:
            ctx.permit.use = use
            self.uses.append(use)

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        now = time.monotonic()
        with self._lock:
            self._reserved -= 1
            if isinstance(ctx.permit, _Permit) and ctx.permit.use is not None:
                ctx.permit.use.released_at = now
