"""One run, from its first event to its recorded end: how the agent's answer becomes the outcome.

Outcomes. A run always ends in a terminal state that the store records: the agent returned ->
``completed`` (its reply is the status message; an Outcome names another state); it raised ->
``failed`` (the caller sees the error's type and an id, or an AgentError's own message, while
the text goes to the log: failures.py); its scope was cancelled -> ``canceled``, with the reason
(hang-up, CancelTask, shutdown, ...). An unanswered ``ctx.ask`` fails it with its own reason.
The end is recorded under a shielded, bounded scope, so even a run cancelled by the nursery's
own cancellation leaves a record; one the store cannot take in time is retried in the
background (:mod:`.ending`). One log line marks each run's start and end. A task stored whose
run never started (its caller hung up first, shutdown began) gets its end here too
(:func:`record_unstarted`).

The runner (:mod:`.runner`) starts, tracks, cancels and drains runs; it hands each run to
:func:`execute_run` in a task of the server nursery, which sees the runner only as
:class:`RunsHere`.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import anyio

from ..observe import Observer
from ..protocol.errors import ServerUnavailable
from ..protocol.trajectory import LogEvent
from ..protocol.types import Message, Task, TaskState
from ..store.base import TaskStore
from ..store.outage_log import OutageLog
from .context import Agent, AskFailed, RunContext
from .ending import REASON_TEXT, EndRecorder
from .failures import AgentError, failure_text, new_error_id
from .outcome import end_of
from .run import Run

log = logging.getLogger("scoped_a2a.runs")
_outages = OutageLog(log)  # store/outage_log.py

REDELIVER_REASONS = frozenset({"shutdown", "nursery", "lease-lost"})
"""Why a run from a durable queue may stop without recording an end: its process is going away
(or lost the run's lease), and the queue redelivers the run to another worker."""


_OUTCOME = {state: state.name.lower() for state in TaskState}
"""A run's outcome as logged and observed: its end state's name in lower case."""


class RunsHere(Protocol):
    """What executing a run needs of the runner that started it (:class:`.runner.Runner`)."""

    agent: Agent
    store: TaskStore
    expose_errors: bool
    ending: EndRecorder
    observe: Observer

    async def append(self, run: Run, event: LogEvent) -> int:
        """Append one of the run's events to its task's log; its position."""
        ...

    def forget(self, run: Run, principal_id: str) -> None:
        """The run has ended: it no longer executes here, nor counts for its caller."""
        ...

    def check_idle(self) -> None:
        """Wake whoever waits for the runs to end, if none is left."""
        ...


async def execute_run(
    run: Run, ctx: RunContext, continuing: bool, redeliverable: bool, principal_id: str,
    runner: RunsHere,
) -> None:
    """Execute ``run`` (``ctx`` is its context) to its end, and record that end.

    ``run`` and ``ctx`` come first: an observer's ``run`` hook reads them there
    (observe/tracing.py finds a caller's trace context in the context's metadata).

    A run ``continuing`` an existing task records the message that started it first (a new
    task already holds it). The agent's return value, exception or cancellation decides the
    end (see the module); it is recorded through :class:`.ending.EndRecorder` (shielded,
    bounded), so a run cancelled by the nursery still leaves a record, unless
    ``redeliverable`` (from a durable queue) and stopped by shutdown or a lost lease: the
    queue runs it again elsewhere. Then ``runner`` forgets the run. The agent's errors and the
    run's own cancellation are its outcome, not raised; a cancellation from outside the run's
    scope (the nursery's) is raised once the end is recorded.
    """
    run.began = True
    if log.isEnabledFor(logging.INFO):
        mode = "interactive" if run.detach_reason is None else \
            f"detached ({run.detach_reason})"
        log.info("run start task=%s context=%s mode=%s", run.task_id, run.context_id, mode)
    state: TaskState | None = None
    text: str | Message | None = None
    error_id: str | None = None
    ask_failed = False
    reason = "completed"
    try:
        with run.scope:
            try:
                # A run that continues an existing task records the message that started
                # it (a new task already holds its first message in its history). Inside
                # the ``try``: a store error here fails this task, not the server nursery.
                # An agent that reports its own start (an adapted executor: its first
                # working may carry a message) gets a new task still submitted.
                if continuing or not getattr(runner.agent, "reports_start", False):
                    first = ctx._status(
                        TaskState.WORKING, None, message=ctx.message if continuing else None)
                    first.metadata = run.take_marker_note()
                    await runner.append(run, first)
                else:
                    ctx.start_pending = True
                reply = await runner.agent(ctx)
            except AskFailed as exc:
                # No answer to ctx.ask (timeout, or the cap on parked runs): an expected
                # outcome with its own reason, logged by the one "run end" line below. It
                # stays the outcome although the end of the wait also cancels a run no one
                # holds (Run.parking): that cancel is for an agent that would carry on.
                state, reason, text = TaskState.FAILED, exc.reason, str(exc)
                ask_failed = True
            except Exception as exc:
                state, reason = TaskState.FAILED, "error"
                # The caller sees the type and this id (or an AgentError's own message);
                # the text may hold internals, so it goes to the log only (failures.py).
                error_id = new_error_id()
                text = failure_text(exc, error_id, expose=runner.expose_errors)
                # An AgentError is a deliberate answer, not a bug: no traceback; nor is
                # the store's refusal of a write (a full disk, Redis away: its message says
                # it all). That one is rate-limited by class and at INFO: the end's own
                # line, which follows, is the warning of it.
                if isinstance(exc, ServerUnavailable):
                    _outages.failed("store", "agent failed on task %s (error id %s): %s",
                                    run.task_id, error_id, exc, level=logging.INFO)
                else:
                    log.warning("agent failed on task %s (error id %s): %s", run.task_id,
                                error_id, failure_text(exc, error_id, expose=True),
                                exc_info=not isinstance(exc, AgentError))
            else:
                state, text, reason = end_of(reply)
    finally:
        ctx._stop_parking()  # an agent that returned while waiting for input frees its slot
        if state is None or (state is TaskState.FAILED and run.scope.cancel_called
                             and not ask_failed):
            reason = run.cancel_reason or "nursery"
            state, text = TaskState.CANCELED, f"Canceled: {REASON_TEXT.get(reason, reason)}"
            if run.canceled_by is not None and reason == run.cancel_reason:
                text += f" (by {run.canceled_by})"
        run.end_reason = reason
        if redeliverable and state is TaskState.CANCELED and reason in REDELIVER_REASONS:
            # Not an outcome: the durable queue runs it again on another worker.
            log.warning("run of task %s stopped (%s); left for redelivery",
                        run.task_id, reason)
            reason = "redeliver"
        else:
            await runner.ending.record(run, state, text, reason, error_id=error_id,
                                     retry=not redeliverable)
        runner.forget(run, principal_id)
        run.done.set()
        if run.end_error_lasting:  # its followers re-check and answer (server/end_lost.py)
            runner.store.wake(run.task_id)
        run.settled(None)  # blocking sends waiting in their own task answer now
        runner.check_idle()
        outcome, seconds = _OUTCOME[state], time.monotonic() - run.started
        runner.observe.run_ended(run, outcome, reason, seconds)
        if run.watch is not None:
            run.watch.ended(run, outcome, reason, seconds)
        log.info("run end task=%s outcome=%s duration_ms=%.1f reason=%s",
                 run.task_id, outcome, seconds * 1000, reason)


async def record_unstarted(runner: RunsHere, task: Task, exc: BaseException) -> None:
    """Record the end of a stored task whose run never started, ``exc`` being why (shielded,
    bounded, as any run's end): canceled for a hang-up or shutdown, else failed."""
    state, reason = TaskState.CANCELED, "error"
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        reason = "hang-up"
    elif isinstance(exc, ServerUnavailable):
        reason = "shutdown"
    else:
        state = TaskState.FAILED
    error_id = None
    if state is TaskState.CANCELED:
        text = f"Canceled: {REASON_TEXT[reason]}"
    else:  # the caller sees the type and an id, as for an agent's own failure
        error_id = new_error_id()
        text = failure_text(exc, error_id, expose=runner.expose_errors)
        log.warning("task %s failed before its run started (error id %s)", task.id,
                    error_id, exc_info=exc)
    await runner.ending.record(Run(task.id, task.context_id, None), state, text, reason,
                             error_id=error_id)
    log.info("run end task=%s outcome=%s duration_ms=0.0 reason=%s (never started)",
             task.id, state.name.lower(), reason)
