"""Push watches across the processes of a shared store: adoption and hand-over
(store/push_watches.py has the rule; :mod:`.service` the watches).

:func:`adopt_loop` runs in each serving (and ``worker``) process's server nursery: every third
of the lease it adopts the watches that a stopped process released or that a dead process left
(its lease lapsed), a batch at a time, and starts them here (skipping any it watches already:
after an adoption whose reply was lost the store also returns what this process owns).
:func:`hand_on` is what a watch does when it stops in a process that is leaving (shutdown): it
leaves the rest to the next adopter.

Cancellation: :func:`adopt_loop` runs until cancelled (a batch adopted as it is cancelled is
started, or left owned by this process, which releases it on exit or whose lease lapses).
Errors: store trouble is logged (once per class and period, ``store/outage_log.py``) and retried
at the next period.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import anyio

from ..protocol.errors import ServerUnavailable
from ..protocol.types import TaskState
from ..store.outage_log import OutageLog
from ..store.push_watches import PushWatches

if TYPE_CHECKING:
    from .records import DeliveryRecord

log = logging.getLogger("scoped_a2a.push")

ADOPT_BATCH = 200
"""Watches adopted per store call (a full batch is followed by the next at once)."""

HANDED_ON = ("this server shut down during the delivery; the replica that adopts the watch "
             "makes it again (same delivery id)")


class _Watches(Protocol):
    closing: bool

    def _watch(self, task_id: str, config_id: str, *, v1: bool, after: int,
               state: TaskState) -> None: ...

    def watching(self, task_id: str, config_id: str) -> bool: ...


class _Watch(Protocol):
    task_id: str
    config_id: str
    cursor: int
    current: DeliveryRecord | None


async def adopt_loop(service: _Watches, owners: PushWatches, scope: anyio.CancelScope) -> None:
    """Adopt free watches into ``service`` every ``owners.period`` seconds until ``scope`` is
    cancelled or the service closes."""
    outages = OutageLog(log)
    with scope:
        while not service.closing:
            batch = []
            try:
                batch = await owners.adopt(ADOPT_BATCH)
                outages.recovered("adopt")
            except ServerUnavailable as exc:
                outages.failed("adopt", "could not check for push watches to adopt: %s", exc)
            for task_id, config_id, cursor, state, v1 in batch:
                if service.watching(task_id, config_id):
                    continue  # ours already (re-read after an adoption whose reply was lost)
                log.info("push watch of task %s config %s adopted from a stopped process, "
                         "resuming after position %d", task_id, config_id, cursor)
                service._watch(task_id, config_id, v1=v1, after=cursor, state=TaskState(state))
            if len(batch) < ADOPT_BATCH:
                await anyio.sleep(owners.period)


async def hand_on(owners: PushWatches, watch: _Watch) -> None:
    """Leave ``watch`` (stopping in a process that shuts down) to another process: its
    delivery in flight, if any, is recorded as left to the adopter. Raises
    ServerUnavailable (the watch is adopted anyway once this process's lease lapses)."""
    current = watch.current
    if current is not None and current.status == "pending":
        current.finish("undelivered", HANDED_ON)
    await owners.release([(watch.task_id, watch.config_id)])
    log.info("push watch of task %s config %s left to another replica after position %d",
             watch.task_id, watch.config_id, watch.cursor)
