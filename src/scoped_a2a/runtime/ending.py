"""Recording how a run ended: its terminal event, written under a shielded deadline, and written
again in the background when the store cannot take it in time.

Why the background retry: a durable store can be unable to write for a while (Redis failing over,
another connection holding the SQLite file's write lock). A run that ended meanwhile used to
leave its task ``working`` for good: a blocking send following it never got its answer, and
GetTask said ``working`` until a restart (SQLite recovery) or forever (Redis). Now the end is
retried from the server nursery, with a growing pause, until the store takes it or says the
task ended some other way; the callers following the task get their answer then. Not for a
run from a durable queue: its entry stays queued and the queue runs it again under a new lease
(a late write of the old attempt's end could land in the middle of the new attempt).

Cancellation: :meth:`EndRecorder.record` is shielded and bounded by :data:`RECORD_TIMEOUT`, so
a run cancelled by the nursery's own cancellation still leaves a record when the store is
there. Retries stop at shutdown (:meth:`EndRecorder.stop`): each one left is logged (a
durable store's own recovery takes such a task over at the next start).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from ..protocol.errors import ServerUnavailable
from ..protocol.types import Message, TaskState, TaskStatus, TaskStatusUpdateEvent, utc_timestamp
from ..store.base import TaskEnded, TaskStore
from ..store.outage_log import OutageLog
from .outcome import end_message
from .run import Run

log = logging.getLogger("scoped_a2a.runs")
_outages = OutageLog(log)  # one line per few seconds while the store is away, not one per run

REASON_TEXT = {
    "hang-up": "the caller hung up",
    "CancelTask": "canceled by CancelTask",
    "shutdown": "the server shut down before the run finished",
    "nursery": "the server nursery was cancelled",
    "deadline": "the caller's deadline passed before the run finished",
    "process-lost": "the server process running it was lost (its liveness lease lapsed)",
}

_NOT_CLAIMING = frozenset({TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
"""Ends that do not claim the task's answer is whole: recorded as they are after lost events."""

RECORD_TIMEOUT = 5.0
"""Seconds a run's end may take to record (shielded) before it is retried in the background."""

RETRY_PAUSES = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Pauses between background retries of an end; the last one repeats until shutdown."""


class EndRecorder:
    """Writes the terminal events of one runner's runs to ``store``.

    ``store_error`` is called with a label each time the store fails to take an end (the
    runner counts it for metrics). Lives on one event loop; not thread-safe.
    """

    def __init__(self, store: TaskStore, store_error: Callable[[str], None]) -> None:
        self.store = store
        self._store_error = store_error
        self._nursery: TaskGroup | None = None
        self._retrying: dict[str, tuple[anyio.CancelScope, Run]] = {}
        self._stopped = False

    def attach(self, nursery: TaskGroup) -> None:
        """Retry ends in ``nursery`` (the server nursery) from now on."""
        self._nursery = nursery

    @property
    def retrying(self) -> int:
        """How many ends wait for their retry now."""
        return len(self._retrying)

    def retrying_run(self, task_id: str) -> Run | None:
        """The ended run whose end of ``task_id`` waits for its background retry, if any (a
        reader that finds the task ``working`` with no live run checks why: server/end_lost.py)."""
        held = self._retrying.get(task_id)
        return held[1] if held is not None else None

    async def write(
        self, run: Run, state: TaskState, text: str | Message | None, reason: str, *,
        error_id: str | None = None, quiet: bool = False,
    ) -> TaskState | None:
        """One attempt at appending the end; the state recorded once the task has ended (this
        end, or one recorded first: terminal states never change). A store failure is logged
        (unless ``quiet``) and counted, and gives None. Not bounded: callers bound it.

        An end that would say the task completed (or waits for input) is recorded ``failed``
        instead when the store lost events the run had appended (``TaskStore.lost_events``:
        a commit that failed after the append returned): the task's answer is incomplete."""
        lost = self.store.lost_events(run.task_id)
        if lost is not None and state not in _NOT_CLAIMING:
            state, reason, error_id = TaskState.FAILED, "events-lost", None
            text = f"{lost}. The answer is incomplete: send the message again"
        msg = end_message(state, text, reason, task_id=run.task_id, context_id=run.context_id,
                          error_id=error_id)
        metadata = {"reason": reason}
        if run.canceled_by is not None and state is TaskState.CANCELED:
            metadata["canceledBy"] = run.canceled_by  # the console's operator (or owner)
        event = TaskStatusUpdateEvent(
            task_id=run.task_id,
            context_id=run.context_id,
            status=TaskStatus(state=state, message=msg, timestamp=utc_timestamp()),
            metadata=metadata,
        )
        try:
            await self.store.append(run.task_id, event)
        except TaskEnded:
            run.end_error, run.end_error_lasting = None, False
            return state
        except ServerUnavailable as exc:  # the store's own, readable refusal: no traceback
            # Its first clause is the cause; the rest is advice for a refused new write.
            run.end_error = str(exc).split(";")[0].strip()
            run.end_error_lasting = exc.lasting
            self._store_error("record_end")
            if not quiet:
                _outages.failed("run end", "could not record the end of task %s (%s): %s",
                                run.task_id, state.name.lower(), exc, level=logging.ERROR)
            return None
        except Exception as exc:
            run.end_error = f"the task store failed ({type(exc).__name__})"
            run.end_error_lasting = False
            self._store_error("record_end")
            if not quiet:
                log.exception("recording the end of task %s failed", run.task_id)
            return None
        run.end_error, run.end_error_lasting = None, False
        if lost is not None:
            # The one warning of it when the end is stored at once (the agent's own failure
            # on the refused write is logged at INFO by the runner).
            log.warning("task %s: %s; its end is recorded %s", run.task_id, lost,
                        state.name.lower())
        return state

    async def record(
        self, run: Run, state: TaskState, text: str | Message | None, reason: str, *,
        error_id: str | None = None, retry: bool = True,
    ) -> None:
        """Record the end, shielded, within :data:`RECORD_TIMEOUT`; if the store does not take
        it by then, hand it to a background retry (unless ``retry`` is false) and return.

        ``retry`` false is for a run from a durable queue: an end it could not record leaves
        its entry queued, and the queue runs it again under a new lease. A late write of the
        first attempt's end, outside its lease, could land while that attempt runs.
        """
        if not self.store.may_suspend:
            # The store's append cannot wait (or fail for a while): nothing to guard or retry.
            await self.write(run, state, text, reason, error_id=error_id)
            return
        recorded: TaskState | None = None
        with anyio.move_on_after(RECORD_TIMEOUT, shield=True):
            # Quiet: the one line for this failure is logged below, with what comes next.
            recorded = await self.write(run, state, text, reason, error_id=error_id,
                                        quiet=True)
        if recorded:
            return
        if run.end_error is None:
            run.end_error = (f"the task store did not take it within {RECORD_TIMEOUT:.0f} s")
        if retry:
            self._retry_later(run, state, text, reason, error_id)
        else:
            _outages.failed("run end", "could not record the end of task %s (%s): %s; its "
                            "queue runs it again", run.task_id, state.name.lower(),
                            run.end_error, level=logging.ERROR)

    def _retry_later(self, run: Run, state: TaskState, text: str | Message | None, reason: str,
                     error_id: str | None) -> None:
        if self._nursery is None or self._stopped or run.task_id in self._retrying:
            _outages.failed("run end", "could not record the end of task %s (%s): %s",
                            run.task_id, state.name.lower(), run.end_error, level=logging.ERROR)
            return
        _outages.failed("run end", "could not record the end of task %s (%s): %s; retrying in "
                        "the background", run.task_id, state.name.lower(), run.end_error,
                        level=logging.ERROR)
        scope = anyio.CancelScope()
        self._retrying[run.task_id] = (scope, run)
        self._nursery.start_soon(self._retry, scope, run, state, text, reason, error_id,
                                 name=f"scoped_a2a record end {run.task_id}")

    async def _retry(self, scope: anyio.CancelScope, run: Run, state: TaskState,
                     text: str | Message | None, reason: str, error_id: str | None) -> None:
        began = time.monotonic()
        recorded: TaskState | None = None
        try:
            with scope:
                for attempt in itertools.count(1):
                    await anyio.sleep(RETRY_PAUSES[min(attempt, len(RETRY_PAUSES)) - 1])
                    with anyio.move_on_after(RECORD_TIMEOUT):
                        recorded = await self.write(run, state, text, reason,
                                                    error_id=error_id, quiet=True)
                    if recorded:
                        _outages.failed("late end", "recorded the end of task %s (%s) %.1fs "
                                        "late, attempt %d", run.task_id, recorded.name.lower(),
                                        time.monotonic() - began, attempt + 1)
                        return
        finally:
            self._retrying.pop(run.task_id, None)
            if not recorded:
                log.error("gave up recording the end of task %s (%s) at shutdown",
                          run.task_id, state.name.lower())

    def stop(self) -> None:
        """Stop every background retry (shutdown), and start no more: each one left is logged
        as given up."""
        self._stopped = True
        for scope, _ in list(self._retrying.values()):
            scope.cancel()
