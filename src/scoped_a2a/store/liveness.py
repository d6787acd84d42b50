"""Liveness leases of interactive runs on a shared store: what is store-independent.

An interactive run executes in the process that accepted its send; its caller's connection goes
to that process. If the process dies (SIGKILL, OOM, a lost machine) nobody records how the run
ended, so without more its task would stay ``working`` for ever and a resend of its message
would follow a run that no longer exists. On a single-process store (SQLite) the next start
records such runs; on a shared store (Redis, PostgreSQL) other processes keep serving, so they
must notice the death themselves.

The rule: **each process holds one lease for all the runs it executes**. A store that offers
:class:`ProcessLeases` registers every task a process stores for an interactive run under
that process's id, in the same write that stores the task (no extra round trip per run), and
drops it in the write that records the task's end. The process renews its lease every
``lease / 3`` seconds (one write per process and period, whatever the number of runs). When a
lease lapses (``lease`` seconds without a renewal, by the store's own clock), any live process
that checks (every ``lease / 3`` s, :func:`keep_alive`) records each registered task still
running as ``canceled`` with the reason :data:`LOST_REASON`; a resend of its message then runs
it again (``server/resend.py``), as after an SQLite restart. So no task acknowledged as working
stays so longer than about ``lease + lease / 3`` seconds after its process died.

Detached runs queued durably are not registered: the queue's own lease takes them over
(``ctx.attempt`` 2).

Store-specific parts (:class:`~.process_leases.ProcessLeases`): Redis
(``store/redis/leases.py``); PostgreSQL (``store/postgres/leases.py``) on a table of processes
and a column of the task row.

Cancellation: :func:`keep_alive` runs until cancelled; an end being recorded when it is
cancelled either is appended or not (the next check does it again). Errors: store trouble is
logged (once per class and period, :mod:`.outage_log`) and retried at the next period.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import anyio

from ..protocol.errors import ServerUnavailable, TaskNotFound
from ..protocol.ids import new_id
from ..protocol.types import (
    Message,
    Part,
    Role,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from .base import TaskEnded, TaskStore
from .outage_log import OutageLog
from .process_leases import DEFAULT_LEASE, ProcessLeases

log = logging.getLogger("scoped_a2a.liveness")

LOST_REASON = "process-lost"
"""The end reason of an interactive run whose process stopped renewing its lease."""

LOST_TEXT = ("Canceled: the server process running this interactive run was lost (it stopped "
             "renewing its lease), and its caller's connection with it; send the message again")

UNSTARTED_REASON = "not-started"
"""The end reason of a task whose store lost the answer to its create (the connection went
while it committed), so its send failed and its run never started (store/postgres/unstarted.py);
a resend of its message runs it again, as after a lost process."""

UNSTARTED_TEXT = ("Canceled: the connection to the task store was lost while this task was "
                  "being stored, so its send failed and its run never started; send the "
                  "message again (same messageId)")

LOST_PARKED_TEXT = ("Canceled: the server process holding this run while it waited for input "
                    "was lost (it stopped renewing its lease), and the run with it; start "
                    "over with a new message")


CANCEL_SEP = "\n"
"""Between a task id and the reason in a cancel request sent to every process (task ids hold no
control character): ``task id`` alone asks for ``CancelTask``."""


def cancel_request(task_id: str, reason: str) -> str:
    """The payload of a cancel request for ``task_id``'s run, saying why (:func:`cancel_reason`
    reads it)."""
    return f"{task_id}{CANCEL_SEP}{reason}"


def cancel_reason(payload: str) -> tuple[str, str]:
    """(task id, reason) of a cancel request: the reason a lapsed lease's request carries
    (:data:`LOST_REASON`), so that a holder alive after all (a partition) records its run's end
    with it, not as a ``CancelTask`` (it hears the request before the reaper records the end);
    ``CancelTask`` for a bare task id (a caller's CancelTask through another replica)."""
    task_id, _, reason = payload.partition(CANCEL_SEP)
    return task_id, reason or "CancelTask"


def lost_event(task_id: str, context_id: str, state: TaskState, reason: str,
               text: str) -> TaskStatusUpdateEvent:
    """The ``canceled`` status that ends a run nobody can end any more (its process died),
    with ``reason`` on the event and on its message (where a resend looks for it)."""
    message = Message(message_id=new_id(), role=Role.AGENT, parts=[Part(text=text)],
                      task_id=task_id, context_id=context_id, metadata={"reason": reason})
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id=context_id, metadata={"reason": reason},
        status=TaskStatus(state=state, message=message, timestamp=utc_timestamp()))


async def record_lost(store: TaskStore, task_id: str, reason: str = LOST_REASON) -> bool:
    """Record ``task_id``'s run as lost (canceled, ``reason``: :data:`LOST_REASON` or
    :data:`UNSTARTED_REASON`); True if this call recorded it (False: it had ended, or is
    gone). Raises ServerUnavailable."""
    try:
        task, _ = await store.get(task_id)
    except TaskNotFound:
        return False
    if task.status.state.terminal:
        return False
    if reason == UNSTARTED_REASON:
        text = UNSTARTED_TEXT
    else:
        text = LOST_PARKED_TEXT if task.status.state.interrupted else LOST_TEXT
    event = lost_event(task_id, task.context_id, TaskState.CANCELED, reason, text)
    with contextlib.suppress(TaskEnded, TaskNotFound):
        await store.append(task_id, event)
        return True
    return False


async def reap(store: TaskStore, leases: ProcessLeases) -> int:
    """Record the runs of every lapsed process as lost; how many this call recorded."""
    recorded = 0
    for process, task_ids in await leases.lapsed():
        ended = 0
        async with anyio.create_task_group() as tg:
            async def one(task_id: str) -> None:
                nonlocal ended
                if await record_lost(store, task_id):
                    ended += 1

            for task_id in task_ids:
                tg.start_soon(one, task_id)
        if ended:
            log.warning("process %s stopped renewing its lease: %d interactive run(s) "
                        "recorded canceled (%s)", process, ended, LOST_REASON)
        recorded += ended
    return recorded


async def keep_alive(store: TaskStore, leases: ProcessLeases) -> None:
    """Renew this process's lease and record the runs of lapsed processes, every third of
    the lease, until cancelled. Never raises for store trouble (it is logged, rate-limited).

    The renewal runs on a fixed cadence (every third of the lease from the first renewal,
    however long one took); the check has a task of its own after the first one (done right
    after the first renewal): recording another process's runs lost (a write per run) or a
    slow check must never delay the renewal, or a live process under load could let its
    own lease lapse and have its waiting runs recorded lost by another."""
    period = leases.lease / 3

    async def check() -> None:
        outages = OutageLog(log)
        while True:
            try:
                await reap(store, leases)
                outages.recovered("reap")
            except ServerUnavailable as exc:
                outages.failed("reap", "liveness lease check: %s", exc)
            await anyio.sleep(period)

    async with anyio.create_task_group() as tg:
        outages = OutageLog(log)
        first, checking = True, False
        due = anyio.current_time()
        while True:
            try:
                if not await leases.beat() and not first:
                    log.error("this process's lease lapsed (the store was unreachable or the "
                              "process stalled for over %.1f s): other processes may have "
                              "recorded its interactive runs lost", leases.lease)
                outages.recovered("liveness")
                if not checking:
                    # The store is reached: check other processes now (a restarted lone
                    # server records its former runs lost), then every period on their own.
                    checking = True
                    await reap(store, leases)
                    tg.start_soon(_after, period, check, name="scoped_a2a lease check")
            except ServerUnavailable as exc:
                if first:
                    # Never reached yet: whoever opened the store says so (serve's start-up
                    # check is one line), and no run depends on this lease before it is first
                    # renewed.
                    log.debug("liveness lease: %s", exc)
                else:
                    outages.failed("liveness", "liveness lease: %s", exc)
            first = False
            # From when this renewal was due, not from when it ended (a slow one, or the first
            # check, eats into the wait); one more than a period late goes out at once.
            due = max(due + period, anyio.current_time())
            await anyio.sleep_until(due)


async def _after(delay: float, fn: Callable[[], Awaitable[None]]) -> None:
    await anyio.sleep(delay)
    await fn()


async def retire(leases: ProcessLeases, *, renewed: bool = True) -> None:
    """:meth:`ProcessLeases.retire`, shielded and bounded (for a store's clean exit);
    nothing if the lease was never ``renewed`` (the store was never reached)."""
    if not renewed:
        return
    with anyio.move_on_after(2, shield=True):
        try:
            await leases.retire()
        except ServerUnavailable as exc:
            log.info("could not retire this process's lease (%s); it lapses by itself", exc)


__all__ = ["DEFAULT_LEASE", "LOST_REASON", "UNSTARTED_REASON", "ProcessLeases", "cancel_reason",
           "cancel_request", "keep_alive", "lost_event", "reap", "record_lost", "retire"]
