"""Interactive creates whose commit was lost: settled by the process that made them.

A blocking send (or a stream) stores its task, naming this process's liveness lease
(leases.py), then starts its run here. If the connection is lost while that create commits
(:class:`.connection.OutcomeUnknown`), nobody can tell whether the task was stored: the send
fails ("may or may not have taken effect") and releases its message claim (claims.release),
so the caller's resend runs the message once, as a new task. A task stored so was never run,
and without more it would stay ``submitted`` until this process ends and its lease lapses
(store/liveness.py), listed to its owner as if it were about to start.

So the store remembers each such task and, as soon as the database answers, settles it: a task
that was stored and has not ended is recorded ``canceled``, reason ``not-started``
(:data:`..liveness.UNSTARTED_REASON`), through the ordinary terminal append (which clears its
lease registration); one that was not stored is forgotten once it has not been found for
:data:`SETTLE_WINDOW` seconds (a ``COMMIT`` already on its way when the connection went may
still land meanwhile; one that lands later than that is recorded by the lease rule when this
process ends).

Why canceled, not run or adopted: the send's caller was told to resend, and its resend runs the
message (its claim went with the failed send). Running the stored task too would run the
message twice; letting the resend adopt it would need its claim kept, and then a resend that
never comes leaves it stuck as before. ``not-started`` is a rerun reason (server/resend.py), so
a resend that still finds this task (its claim's release failed too) runs the message again
instead of waiting for a run that does not exist. The message runs at most once per resend
that reaches a working store, as before.

Cancellation: :meth:`Unstarted.run` loops until cancelled; an end being appended when it is
cancelled is appended or not (the next round, or the lease rule, does it). Errors: a database
that cannot be used is retried with backoff (0.1 s doubling to 2 s; the pool logs the outage
once); nothing here raises to a caller.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from ...protocol.errors import ServerUnavailable
from ..liveness import UNSTARTED_REASON, record_lost
from .connection import Pool

if TYPE_CHECKING:
    from ..base import TaskStore

log = logging.getLogger("scoped_a2a.postgres")

SETTLE_WINDOW = 60.0
"""Seconds a create whose commit was lost is looked for before it is taken as not stored."""
MAX_PENDING = 10_000
"""Creates remembered at most (an outage failing more leaves the rest to the lease rule)."""
PERIOD = 1.0
"""Seconds between looks while some created task has not been found."""


class Unstarted:
    """The interactive creates of this process whose outcome is not known yet."""

    def __init__(self, store: TaskStore, pool: Pool, process_id: str) -> None:
        self.store = store
        self.pool = pool
        self.process_id = process_id
        self.pending: dict[str, float] = {}
        """Task id -> when its create failed (``anyio.current_time``)."""
        self._added = anyio.Event()

    def add(self, task_id: str) -> None:
        """``task_id``'s create may have committed, and its run will not start (never raises)."""
        if len(self.pending) < MAX_PENDING:
            self.pending[task_id] = anyio.current_time()
            self._added.set()

    async def run(self) -> None:
        """Settle what :meth:`add` remembers, until cancelled."""
        while True:
            await self._added.wait()
            self._added = anyio.Event()
            delay = 0.1
            while self.pending:
                try:
                    await self.settle()
                    delay = 0.1
                    wait = PERIOD
                except ServerUnavailable:
                    delay = wait = min(delay * 2, 2.0)
                if self.pending:
                    await anyio.sleep(wait)

    async def settle(self) -> int:
        """One look: record each remembered task that was stored and has not ended; forget
        the ended ones and those not found within the window. How many this recorded.
        Raises ServerUnavailable."""
        ids = list(self.pending)
        # Still naming this process: stored, and not ended (the terminal append clears it).
        rows = await self.pool.run(lambda c: c.all(
            "SELECT id FROM tasks WHERE id = ANY(%s) AND process = %s",
            (ids, self.process_id)), retry=True)
        stored = {str(r[0]) for r in rows}
        now, recorded = anyio.current_time(), 0
        for task_id in ids:
            if task_id in stored:
                if await record_lost(self.store, task_id, UNSTARTED_REASON):
                    recorded += 1
                    log.info("task %s was stored although its send failed (the answer to its "
                             "commit was lost): recorded canceled (%s)", task_id,
                             UNSTARTED_REASON)
                del self.pending[task_id]
            elif now - self.pending[task_id] >= SETTLE_WINDOW:
                del self.pending[task_id]
        return recorded
