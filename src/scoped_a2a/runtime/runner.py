"""The runner: starts runs in the server nursery, records how each ends, and drains on shutdown.

Ownership. Every run executes in the server nursery (the task group handed to the app, or the
one its lifespan opens), inside the run's own cancel scope. Detached runs are owned by that nursery
alone; interactive runs are also bounded by their holders (see :mod:`.run`). Nothing here keeps a
global: the nursery is passed in.

Outcomes. A run always ends in a terminal state that the store records, even when cancelled by
the nursery's own cancellation: :mod:`.execution` executes each run (in a task of the nursery)
and decides and records its end; the runner starts, tracks, cancels and drains the runs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..observe import NOOP, Observer
from ..protocol.deadline import budget_from
from ..protocol.errors import ServerUnavailable, TaskNotCancelable, UnsupportedOperation
from ..protocol.on_disconnect import DETACHED_KEY
from ..protocol.principal import ANONYMOUS, Principal
from ..protocol.trajectory import LogEvent
from ..protocol.types import Message, Task, TaskState, TaskStatusUpdateEvent
from ..store.base import TaskEnded, TaskStore
from ..store.claims import NewClaim
from ..store.launcher import RunLauncher
from .context import Agent, RunContext
from .ending import REASON_TEXT, RECORD_TIMEOUT, EndRecorder
from .execution import execute_run, record_unstarted
from .limits import CallerLimits, CallerRuns
from .policy import RunPolicy
from .run import ParkedRuns, Run, RunWatch
from .workers import RunWorkers

log = logging.getLogger("scoped_a2a.runs")


class Runner:
    """Starts and tracks the runs of one app. Not thread-safe; lives on one event loop."""

    def __init__(
        self, agent: Agent, store: TaskStore, policy: RunPolicy,
        launcher: RunLauncher | None = None, *, expose_errors: bool = False,
        caller_limits: CallerLimits | None = None,
    ) -> None:
        self.agent = agent
        self.expose_errors = expose_errors
        """Send an agent's exception text to callers (development); else type and error id."""
        self.store = store
        self.policy = policy
        self.launcher = launcher
        """Queues new detached runs durably (shared stores); None: run them in this nursery."""
        if launcher is not None:
            launcher.bind(self)
        self.closing = False
        self._nursery: TaskGroup | None = None
        self._workers: RunWorkers | None = None  # the nursery's tasks that execute runs
        self._runs: dict[str, Run] = {}
        self._parked = ParkedRuns(policy.max_parked_runs)
        self.callers = CallerRuns(caller_limits)
        """Runs by principal, checked against the per-caller limits when a task is new."""
        # Made by the first wait for the runs to end (shutdown), set when none is left.
        self._idle: anyio.Event | None = None
        self.observe: Observer = NOOP
        """Traces and metrics of runs (the app sets it; observe/)."""
        self.watch: RunWatch | None = None
        """A live view of the runs started from now on (the console sets it; run.RunWatch)."""
        self.ending = EndRecorder(store, lambda what: self.observe.store_error(what))
        """Records each run's end, retrying in the background if the store cannot take it."""

    # --- wiring ---------------------------------------------------------------------------

    def attach(self, nursery: TaskGroup) -> None:
        """Use ``nursery`` as the server nursery for every run started from now on."""
        self._nursery = nursery
        self._workers = RunWorkers(nursery)
        self.ending.attach(nursery)

    @property
    def idle_workers(self) -> int:
        """How many tasks of the nursery wait to execute the next run (workers.py)."""
        return self._workers.idle if self._workers is not None else 0

    @property
    def active(self) -> int:
        """How many runs are executing now."""
        return len(self._runs)

    @property
    def parked(self) -> int:
        """How many runs wait in ``ctx.ask`` now (at most ``policy.max_parked_runs``)."""
        return self._parked.count

    def get(self, task_id: str) -> Run | None:
        return self._runs.get(task_id)

    # --- starting -------------------------------------------------------------------------

    def check_accepting(self) -> None:
        """Raise ServerUnavailable while shutting down or before the app runs."""
        if self.closing:
            raise ServerUnavailable("the server is shutting down and accepts no new work")
        if self._nursery is None:
            raise ServerUnavailable("the app is not running (serve it, or enter app.running())")

    def start(
        self,
        task: Task,
        message: Message,
        *,
        request_metadata: Mapping[str, Any] | None,
        detach_reason: str | None,
        attempt: int = 1,
        continuing: bool = False,
        redeliverable: bool = False,
        principal: Principal = ANONYMOUS,
        owner: str | None = None,
        marker: str | None = None,
    ) -> Run:
        """Start a run of the agent for ``task`` in the server nursery (in a task of it that
        waits for a run, or a new one: workers.py); return it at once.

        Synchronous on purpose: a caller takes its hold (``with run.hold():``) right after, with
        no checkpoint in between, so no cancellation can fall into the gap.
        Raises ServerUnavailable while shutting down or before the app runs.
        ``redeliverable``: the run came from a durable queue, so when it is stopped by shutdown
        or a lost lease it records no end (the queue runs it again elsewhere).
        ``principal``: the caller the agent sees as ``ctx.principal`` (runs are counted per
        principal for the per-caller limits). ``owner``: the task's owner key (principal and
        tenant; default the principal's id), which scopes what ``ctx.read_task`` may read.
        ``marker``: when ``continuing``, why the server runs this new run of the task detached
        (None: its caller owns it), which its first ``working`` tells the task if the task
        says otherwise (protocol/on_disconnect.py); a new task already says it.
        """
        self.check_accepting()
        assert self._nursery is not None  # check_accepting guarantees it
        if task.id in self._runs:
            raise UnsupportedOperation(f"task {task.id!r} is already running")
        if not continuing and not redeliverable:
            # Again here, with no await before the run is registered: two sends that passed
            # launch()'s early check together cannot both take the last slot.
            self.callers.check(principal.id)
        run = Run(task.id, task.context_id, detach_reason, self._parked)
        told = (task.metadata or {}).get(DETACHED_KEY)
        told = told if isinstance(told, str) else None
        run.say_marker(marker if continuing else told, told)
        run.owner = principal.id if owner is None else owner
        run.watch = self.watch
        run.set_budget(budget_from(request_metadata, message.metadata))  # deadline extension
        ctx = RunContext(
            run,
            message,
            request_metadata=request_metadata,
            emit=lambda event: self.append(run, event),
            input_timeout=self.policy.input_timeout,
            attempt=attempt,
            principal=principal,
            owner=owner,
            new_task=not continuing,
            store=self.store,
            nursery=self._nursery,
        )
        self._runs[task.id] = run
        self.callers.add(principal.id, run)
        if run.watch is not None:
            run.watch.started(run)
        assert self._workers is not None  # made with the nursery
        # A task of the nursery executes the run: an idle one if there is one (workers.py).
        if self.observe is NOOP:  # why: one coroutine frame less per run when nobody observes
            self._workers.start(
                execute_run(run, ctx, continuing, redeliverable, principal.id, self),
                name=f"scoped_a2a run {task.id}")
        else:
            self._workers.start(
                self.observe.run(execute_run, run, ctx, continuing, redeliverable,
                                 principal.id, self),
                name=f"scoped_a2a run {task.id}")
        return run

    # --- launching through a durable queue (shared stores) -------------------------------

    def queues(self, detach_reason: str | None) -> bool:
        """Whether :meth:`launch` stores a new run with this detach reason in the run queue
        (executed by any worker) rather than creating its task and running it here."""
        return self.launcher is not None and detach_reason is not None

    async def launch(
        self,
        task: Task,
        message: Message,
        *,
        request_metadata: Mapping[str, Any] | None,
        detach_reason: str | None,
        new: bool,
        stored: Callable[[], Awaitable[None]] | None = None,
        principal: Principal = ANONYMOUS,
        owner: str | None = None,
        marker: str | None = None,
        claim: NewClaim | None = None,
    ) -> Run:
        """Store a ``new`` task (or continue an existing one) and start its run; return it.

        With a launcher, a new detached run is stored and queued durably (atomically, before
        this returns) and executed by any worker process; the returned Run is a stand-in that
        only carries the ids (holding it keeps nothing alive, as for any detached run). Other
        runs execute here, as :meth:`start`. ``stored`` is awaited once a new task is stored,
        before its run starts here; after it there is no checkpoint before the run is
        returned, so the caller can take its hold safely. If ``stored`` raises or is cancelled,
        or the run cannot start, the stored task is recorded as ended before this re-raises.
        A new task is owned by ``owner`` (default: ``principal``'s id; with a tenant, see
        :func:`~scoped_a2a.protocol.principal.owner_key`), stored with the task.
        ``marker``: for a continued task, as :meth:`start`'s. ``claim``: the send's message
        claim, made in the new task's create (:meth:`.TaskStore.create_claimed`, a run that
        executes here only: :meth:`queues`); AlreadyClaimed when an earlier send holds it
        (nothing stored, no run).
        Raises ServerUnavailable while shutting down or when the store is unreachable, and
        LimitExceeded (storing nothing) when a new task's principal is at a per-caller limit.
        """
        self.check_accepting()
        owner = principal.id if owner is None else owner
        if new:
            self.callers.check(principal.id)
        if self.launcher is not None:
            if claim is not None and detach_reason is not None:
                raise ValueError("a queued run's claim is made before it is submitted")
            if not new:
                # A non-terminal task with no run here has one queued, or (with replicas) in
                # another process.
                if not self.launcher.runs_elsewhere:
                    raise UnsupportedOperation(
                        f"task {task.id!r} is queued: its run has not started yet; send "
                        "follow-ups once it asks for input or ends")
                raise UnsupportedOperation(
                    f"task {task.id!r} is queued or running in another process; send "
                    "follow-ups to the replica that holds its run, or once it ends"
                )
            if detach_reason is not None:
                await self.launcher.submit(
                    task, message, request_metadata=request_metadata,
                    detach_reason=detach_reason, owner=owner,
                )
                if stored is not None:
                    await stored()
                return Run(task.id, task.context_id, detach_reason)
        if not new:
            return self.start(
                task, message, request_metadata=request_metadata, detach_reason=detach_reason,
                continuing=True, principal=principal, owner=owner, marker=marker,
            )
        if claim is not None:
            await self.store.create_claimed(task, claim, owner=owner)
        else:
            await self.store.create(task, owner=owner)
        try:
            if stored is not None:
                await stored()
            return self.start(
                task, message, request_metadata=request_metadata, detach_reason=detach_reason,
                principal=principal, owner=owner,
            )
        except BaseException as exc:
            # The task is stored but no run started (the caller hung up during ``stored``, or
            # shutdown began): record its end, or it would stay submitted forever.
            await record_unstarted(self, task, exc)
            raise

    def resume(self, run: Run, message: Message, detach_reason: str | None,
               marker: str | None = None) -> None:
        """Hand a follow-up message to a run parked in ``ctx.ask``.

        ``marker``: why the server would run the follow-up detached (None: its caller owns
        it). A run once detached stays so, so the run's marker only goes from None to one.

        Raises ServerUnavailable while shutting down (follow-ups are refused like new sends,
        which is why shutdown may cancel parked runs at once), UnsupportedOperation when the
        run is not waiting for input.
        """
        if self.closing:
            raise ServerUnavailable(
                "the server is shutting down and accepts no follow-up messages")
        if not run.parked:
            raise UnsupportedOperation(
                f"task {run.task_id!r} is working; send again once it asks for input or ends"
            )
        if detach_reason is not None:
            run.detach(detach_reason)
        run.say_marker(run.marker or marker, run.marker)
        run.deliver(message)

    async def append(self, run: Run, event: LogEvent) -> int:
        """Append one of ``run``'s events to its task's log; return its position. A task
        ended meanwhile (TaskEnded, raised) cancels the run, which stops at its next
        checkpoint."""
        try:
            position = await self.store.append(run.task_id, event)
        except TaskEnded:
            # Someone recorded an end first (CancelTask without a live run, another replica).
            run.cancel("CancelTask")
            await anyio.lowlevel.checkpoint()
            raise
        if run.watch is not None:
            run.watch.appended(run, event, position)
        if type(event) is TaskStatusUpdateEvent and event.status.state.interrupted:
            run.settled(position)  # a blocking send waiting on the run answers now
        return position

    # --- a run's end (execution.py) -------------------------------------------------------

    def forget(self, run: Run, principal_id: str) -> None:
        """``run`` has ended: it no longer executes here, nor counts for its caller."""
        self._runs.pop(run.task_id, None)
        self.callers.remove(principal_id, run)

    def check_idle(self) -> None:
        """Wake :meth:`_until_idle` if no run is left."""
        if not self._runs and self._idle is not None:
            self._idle.set()

    # --- cancelling -----------------------------------------------------------------------

    async def cancel_task(
        self, task_id: str, *, reason: str = "CancelTask", by: str | None = None
    ) -> Task:
        """Cancel a task's run (or, without one, record it canceled); return the canceled task.

        ``by``: who asked (the console records its user), kept with the recorded end.

        Raises TaskNotFound, or TaskNotCancelable when the task is already terminal, or when it
        ended some other way while the cancel was on its way (a run that returns as it is
        cancelled completes). Waits up to RECORD_TIMEOUT for the run to record its end; if it
        has not by then, raises TaskNotCancelable. Cancelling this call leaves the run's
        cancellation in place (it still ends and records ``canceled``).
        """
        task, _ = await self.store.get(task_id)
        if task.status.state.terminal:
            raise TaskNotCancelable(
                f"task {task_id!r} is {task.status.state.name.lower()}; terminal tasks cannot "
                "be canceled"
            )
        run = self._runs.get(task_id)
        if run is not None:
            run.cancel(reason, by=by)
            with anyio.move_on_after(RECORD_TIMEOUT):
                await run.done.wait()
        else:
            text = f"Canceled: {REASON_TEXT.get(reason, reason)}"
            stand_in = Run(task_id, task.context_id, None)
            if by is not None:
                stand_in.canceled_by = by
                text += f" (by {by})"
            await self.ending.write(stand_in, TaskState.CANCELED, text, reason)
            if self.launcher is not None:
                # The run may execute in another process: the recorded end already stops its
                # next write; this stops it at once.
                await self.launcher.cancel_elsewhere(task_id)
        task, _ = await self.store.get(task_id)
        state = task.status.state
        if not state.terminal:
            raise TaskNotCancelable(f"task {task_id!r} did not end after cancellation")
        if state is not TaskState.CANCELED:
            # The run ended on its own first (the agent returned or raised just as the cancel
            # landed, with no checkpoint left to deliver it): terminal states never change,
            # so the cancel did not happen and the caller must not read it as if it had.
            raise TaskNotCancelable(
                f"task {task_id!r} {state.name.lower()} before it could be canceled; terminal "
                "tasks cannot be canceled (GetTask reads its outcome)"
            )
        return task

    async def _until_idle(self) -> None:
        """Return once no run is executing (the caller bounds the wait)."""
        if not self._runs:
            return
        if self._idle is None or self._idle.is_set():
            self._idle = anyio.Event()
        await self._idle.wait()

    def cancel_all(self, reason: str) -> None:
        """Cancel every run now (synchronously); each records its end with ``reason``. Idle
        workers end (only a shutdown calls this: no run starts after it)."""
        if self._workers is not None:
            self._workers.stop()
        for run in list(self._runs.values()):
            run.cancel(reason)

    # --- shutting down --------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Refuse new work from now on: sends and follow-ups get ServerUnavailable (-32000).

        Runs already started carry on; :meth:`shutdown` ends them.
        """
        if not self.closing and self.watch is not None:
            self.watch.closing()
        self.closing = True
        if self._workers is not None:
            self._workers.stop()  # the nursery's idle tasks end; busy ones after their run

    async def shutdown(self, grace: float) -> None:
        """Refuse new work, give runs ``grace`` seconds, then cancel the rest.

        Runs already parked in ``ctx.ask`` are cancelled at once (they wait for a person, and
        follow-ups are refused from now on); a run that parks during the grace period waits it
        out like any other and is cancelled with the rest. Every run records its end (reason
        ``shutdown``) before this returns, or is logged as unrecorded after RECORD_TIMEOUT more
        seconds. Safe to call again: with no runs left it returns at once.

        On cancellation this stops waiting at once and re-raises; the runs left keep going
        unless the caller cancels them (``cancel_all``), as ``A2AApp.drain`` does.
        """
        self.begin_shutdown()
        for run in list(self._runs.values()):
            if run.parked:
                run.cancel("shutdown")
        with anyio.move_on_after(max(grace, 0.0) if math.isfinite(grace) else math.inf):
            await self._until_idle()
        self.cancel_all("shutdown")
        with anyio.move_on_after(RECORD_TIMEOUT):
            await self._until_idle()
        self.ending.stop()
        for run in self._runs.values():
            log.error("run of task %s ignored cancellation during shutdown", run.task_id)
