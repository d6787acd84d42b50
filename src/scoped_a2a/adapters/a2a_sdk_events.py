"""The event queue an a2a-sdk executor writes to, mapped onto its run (one queue per run).

Both generations of a2a-sdk (1.x protobuf, 0.3 pydantic) name their queue
``a2a.server.events.EventQueue``, so this one class serves both: the generation's conversion
(:mod:`.a2a_sdk_convert` or :mod:`.a2a_sdk03_convert`) turns each enqueued event into one of our
structs, and everything after that is written once. Each event is checked as a2a-sdk's own
server checks it, then becomes one event of the run's task:

- ``Message`` (message mode): the direct reply; the caller of a blocking send gets that message
  and no task (the runtime's direct reply: the agent returns it).
- ``Task``: announces the task (its id must be the run's); a state past ``submitted`` and any
  artifacts it carries are published.
- ``TaskStatusUpdateEvent``: ``working`` is published, unless it says nothing new (no message,
  and the task is working already; a bare ``submitted`` would move the task back);
  ``input-required`` and ``auth-required`` interrupt the run (it waits for the caller's next
  message, counted as parked); a terminal state is the run's outcome, recorded by the runner
  when ``execute`` returns.
- ``TaskArtifactUpdateEvent``: published as is (append and last-chunk kept, any parts).

The start of a new task's run (``ctx.start_pending``: the runtime leaves it ``submitted`` for
the executor to report, as a2a-sdk's own server does): the executor's first ``working`` is the
start, with its message if it has one, so the stream carries no extra bare ``working`` before
it; the executor's first other event (an artifact, an interruption) is preceded by a bare
``working``, and so is a silence of ``START_HOLD`` seconds (:meth:`RunEventQueue.start_after`),
so a running task reads ``working`` soon after it starts whatever the executor does. An end
(terminal status, direct reply) before any of these is recorded from ``submitted``.

The rules (a2a-sdk's): one Message at most, and none once in task mode; no task event in message
mode; a ``Task`` before the first status update of a new task (1.x only: 0.3's server made
the task from its first status update); ids of the run's task and
context. The first violation is kept, raised into the executor as :class:`InvalidExecutorEvent`
(an :class:`~scoped_a2a.AgentError`, so its words reach the caller) and, even if the executor
swallows it, fails the run with reason ``invalid-event``. Events after the end (a terminal state,
the direct reply, a violation, or the run's cancellation) are dropped and counted: ``dropped``
for an end the executor chose (a bug worth a warning), ``dropped_after_stop`` for an end the
runtime caused (a hang-up, CancelTask, a deadline: an executor that then enqueues its own
``canceled``, as Strands' and CrewAI's do, is doing what a2a-sdk asks).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import NoReturn

import anyio
from a2a.server.events import EventQueue

from ..protocol.types import (
    Message,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from ..runtime.context import RunContext
from ..runtime.failures import AgentError
from ..runtime.outcome import Outcome

OurEvent = Message | Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
Convert = Callable[[object], OurEvent | None]
"""A generation's conversion of an enqueued event: our struct, or None when it is not an A2A
event; ValueError when it is one that does not fit A2A 1.0."""

log = logging.getLogger("scoped_a2a.adapters")

START_HOLD = 0.05
"""Seconds a new task stays ``submitted`` waiting for its executor's own first ``working``."""

INVALID_EVENT = "invalid-event"
"""The end reason of a run whose executor broke the event rules."""


class InvalidExecutorEvent(AgentError):
    """The executor enqueued an event that a2a-sdk's rules forbid; the text names the rule."""


class RunEventQueue(EventQueue):
    """The ``EventQueue`` given to ``execute`` and ``cancel`` of one run's executor.

    ``convert``: the installed generation's conversion of an enqueued event. ``known_task``:
    the task already exists where the executor can see it (it continues a task), so status
    updates need no ``Task`` event first.
    """

    def __init__(self, ctx: RunContext, convert: Convert, *, known_task: bool) -> None:
        # 0.3's EventQueue is a concrete class whose __init__ makes its asyncio queue and lock
        # (unused here, cheap); 1.x's is an ABC whose __init__ takes nothing either.
        super().__init__()
        self._ctx = ctx
        self._convert = convert
        self._state = TaskState.SUBMITTED if ctx.start_pending else TaskState.WORKING
        """The task's last published state (the runtime records working as a run starts,
        unless it leaves the start to the executor)."""
        self._starting = anyio.Lock() if ctx.start_pending else None
        """Orders the held start (start_after) before the executor's events."""
        self._mode: str | None = None  # "task" or "message" once the first event says which
        self._task_known = known_task
        self.outcome: Outcome | None = None
        """The end the executor chose with a terminal status, if any yet."""
        self.reply: Message | None = None
        """The executor's direct reply (message mode), if it gave one."""
        self.violation: str | None = None
        self.interrupted = False
        """The last status was input-required or auth-required (the run waits for input)."""
        self.stopped = False
        self.dropped = 0
        """Events enqueued after an end the executor chose (terminal, reply, violation)."""
        self.dropped_after_stop = 0
        """Events enqueued after the runtime stopped the run (expected: its own canceled)."""

    @property
    def ended(self) -> bool:
        return (self.stopped or self.outcome is not None or self.reply is not None
                or self.violation is not None)

    def stop(self) -> None:
        """Publish nothing more (the runtime is ending the run): later events are dropped and
        counted in ``dropped_after_stop``. (Not ``close``: 0.3's queue has an async ``close``
        an executor may call.)"""
        self.stopped = True

    def resume(self) -> None:
        """The caller answered: the runtime recorded ``working`` with the answer."""
        self.interrupted = False
        self._state = TaskState.WORKING

    def failure(self) -> Outcome | None:
        """The run's outcome for a broken rule, if one was broken."""
        if self.violation is None:
            return None
        return Outcome(TaskState.FAILED, self.violation, reason=INVALID_EVENT)

    async def start_after(self, delay: float) -> None:
        """After ``delay`` seconds, publish the run's start (a bare ``working``) if the
        executor has not reported it; run beside ``execute``, cancelled when the run ends."""
        await anyio.sleep(delay)
        assert self._starting is not None
        async with self._starting:
            if not self.ended:
                await self._start()

    async def _start(self) -> None:
        """Publish a bare ``working`` as the run's start, unless it was published already."""
        if self._ctx.start_pending:
            self._ctx.start_pending = False
            self._state = TaskState.WORKING
            await self._ctx.publish(TaskStatusUpdateEvent(
                task_id=self._ctx.task_id, context_id=self._ctx.context_id,
                status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp())))

    async def enqueue_event(self, event: object) -> None:
        """Check ``event`` and publish it on the run (see the module docstring).

        Raises InvalidExecutorEvent for a broken rule; publishing may raise what the run's
        context raises (cancellation of the run, ParkedLimitReached for an interruption past
        the cap on waiting runs).
        """
        if self._starting is None or not self._ctx.start_pending:
            await self._enqueue(event)
        else:
            async with self._starting:
                await self._enqueue(event)

    async def _enqueue(self, event: object) -> None:
        if not self.stopped and anyio.current_effective_deadline() == -math.inf:
            # Enqueued from a cancelled scope: the runtime is ending the run (hang-up,
            # CancelTask, deadline, shutdown) and the executor is answering its cancellation.
            self.stop()
        if self.ended:
            if self.stopped and self.outcome is None and self.reply is None:
                self.dropped_after_stop += 1
            else:
                self.dropped += 1
            return
        try:
            ours = self._convert(event)
        except ValueError as exc:
            self._break(str(exc))
        if isinstance(ours, Message):
            self._expect_mode("message", "a Message", "TaskStatusUpdateEvent or "
                              "TaskArtifactUpdateEvent (a task's updates)")
            self.reply = self._reply(ours)
        elif isinstance(ours, Task):
            self._expect_mode("task", "a Task", "a single Message")
            await self._on_task(ours)
        elif isinstance(ours, TaskStatusUpdateEvent):
            self._expect_mode("task", "a TaskStatusUpdateEvent", "a single Message")
            if not self._task_known:
                self._break("a TaskStatusUpdateEvent came before the Task: enqueue the Task "
                            "first (a2a.helpers.new_task_from_user_message(context.message))")
            await self._on_status(ours)
        elif isinstance(ours, TaskArtifactUpdateEvent):
            self._expect_mode("task", "a TaskArtifactUpdateEvent", "a single Message")
            update = ours
            self._check_ids(update.task_id, update.context_id)
            self.interrupted = False
            await self._start()
            await self._ctx.publish(update)
        else:
            self._break(f"{type(event).__name__} is not an A2A event (enqueue a Message, Task, "
                        "TaskStatusUpdateEvent or TaskArtifactUpdateEvent)")

    # --- the rules ---------------------------------------------------------------------------

    def _break(self, rule: str) -> NoReturn:
        self.violation = self.violation or f"the agent broke an A2A event rule: {rule}"
        raise InvalidExecutorEvent(self.violation)

    def _expect_mode(self, mode: str, what: str, instead: str) -> None:
        if self._mode is None:
            self._mode = mode
        elif self._mode != mode:
            self._break(f"{what} in {self._mode} mode; use {instead}")
        elif mode == "message":
            self._break("a second Message (message mode answers with one)")

    def _check_ids(self, task_id: str, context_id: str) -> None:
        if task_id != self._ctx.task_id or context_id != self._ctx.context_id:
            self._break(f"an event for task {task_id!r} (context {context_id!r}) in the run of "
                        f"task {self._ctx.task_id!r} (context {self._ctx.context_id!r}); use "
                        "context.task_id and context.context_id")

    # --- mapping -----------------------------------------------------------------------------

    def _reply(self, reply: Message) -> Message:
        reply.task_id, reply.context_id = None, self._ctx.context_id  # it belongs to no task
        if reply.role is not Role.AGENT:
            reply.role = Role.AGENT
        return reply

    async def _on_task(self, task: Task) -> None:
        self._check_ids(task.id, task.context_id)
        self._task_known = True
        if task.artifacts:
            await self._start()
        for artifact in task.artifacts or ():
            await self._ctx.publish(TaskArtifactUpdateEvent(
                task_id=task.id, context_id=task.context_id, artifact=artifact))
        if task.status.state not in (TaskState.SUBMITTED, TaskState.UNSPECIFIED):
            await self._on_status(TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status))

    async def _on_status(self, update: TaskStatusUpdateEvent) -> None:
        self._check_ids(update.task_id, update.context_id)
        status = update.status
        if status.state is TaskState.UNSPECIFIED:
            self._break("a status with TASK_STATE_UNSPECIFIED; name the task's state")
        if status.message is not None:
            status.message.task_id = update.task_id
            status.message.context_id = update.context_id
        if status.timestamp is None:
            status.timestamp = utc_timestamp()
        if status.state.terminal:
            self.outcome = Outcome(status.state, status.message)
        elif status.state.interrupted:
            self.interrupted = True
            await self._start()
            self._state = status.state
            await self._ctx.interrupt(update)
        elif status.message is None and status.state in (TaskState.SUBMITTED, self._state):
            return  # says nothing new (see the module docstring)
        else:
            if status.state is not TaskState.WORKING:
                await self._start()
            self._ctx.start_pending = False  # this working is the start
            self.interrupted = False
            self._state = status.state
            await self._ctx.publish(update)
