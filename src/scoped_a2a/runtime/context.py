"""What an agent sees of its run: the message, and the ways to report progress.

Every ``await ctx.*`` call appends one event to the task's log (and so reaches every stream and
subscriber). If the task was ended meanwhile (CancelTask, shutdown), the call raises the
cancellation that is already on its way: the run's scope has been cancelled, so the next
checkpoint ends the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, ExitStack
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from ..protocol.errors import TaskNotFound
from ..protocol.ids import new_id
from ..protocol.principal import ANONYMOUS, TENANT_SEPARATOR, Principal
from ..protocol.trajectory import LogEvent, TrajectoryEvent
from ..protocol.types import (
    Artifact,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from ..store.snapshot import DOWNSTREAM_KEY, carries_server_keys, server_keys_removed
from ..timeouts import fail_after
from . import calls
from .abandon import run_abandonable
from .outcome import Outcome, agent_message, check_text
from .run import Run

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..store.base import TaskStore


T = TypeVar("T")


class AskFailed(Exception):
    """``ctx.ask`` could not get an answer; ``reason`` is recorded with the failed task.

    An agent may catch it (and, say, carry on without the answer). Uncaught, the task is
    recorded as failed with this message and ``reason``, in one log line: it is an expected
    outcome, not a bug in the agent, so no traceback is logged.
    """

    reason = "ask-failed"


class InputTimeout(AskFailed, TimeoutError):
    """Nobody answered ``ctx.ask`` within the input timeout (a TimeoutError, as before)."""

    reason = "input-timeout"


class ParkedLimitReached(AskFailed):
    """``ctx.ask`` was refused at once: the cap on runs waiting for input is reached."""

    reason = "parked-limit"


class Agent(Protocol):
    """An agent: an async callable taking a :class:`RunContext`.

    Its return value (a string or None) completes the task with that reply; an
    :class:`~scoped_a2a.runtime.outcome.Outcome` ends it in the state it names (rejected, say);
    a :class:`~scoped_a2a.protocol.types.Message` is a direct reply (the blocking caller gets
    the message instead of a task: :func:`~scoped_a2a.runtime.outcome.direct_reply`); an
    exception fails it with a message; cancellation cancels it.
    """

    def __call__(self, ctx: RunContext, /) -> Awaitable[str | Outcome | Message | None]: ...


class RunContext:
    """The agent's handle on its run. Create one per run; not shared between runs."""

    def __init__(
        self,
        run: Run,
        message: Message,
        *,
        request_metadata: Mapping[str, Any] | None,
        emit: Callable[[LogEvent], Awaitable[int]],
        input_timeout: float,
        attempt: int = 1,
        principal: Principal = ANONYMOUS,
        owner: str | None = None,
        new_task: bool = True,
        store: TaskStore | None = None,
        nursery: TaskGroup | None = None,
    ) -> None:
        """``owner``: the task's owner key, principal and tenant (default: the principal's id).
        ``store``: where :meth:`read_task` reads. ``nursery``: the server nursery."""
        self._run = run
        self._emit = emit
        self._input_timeout = input_timeout
        self._last_artifact_id: str | None = None
        self._parking: ExitStack | None = None  # open while the task waits for input
        self._nursery = nursery
        self._owner = principal.id if owner is None else owner
        self._store = store
        self.message = message
        self.request_metadata: dict[str, Any] = dict(request_metadata or {})
        self.attempt = attempt
        """1 for a first execution; more when a durable queue redelivers the run."""
        self.new_task = new_task
        """True when this run started its task; False when it continues an existing one (a
        follow-up to an input-required task whose run had ended)."""
        self.principal = principal
        """Who sent the message that started the run (:class:`~scoped_a2a.Principal`; its id
        owns the task). Anonymous without authentication. A run from a durable queue sees the
        owner's id with no claims (claims are not stored)."""
        self.start_pending = False
        """True when the runtime left this new task ``submitted`` for the agent to report its
        own start (an agent whose ``reports_start`` is true: an adapted a2a-sdk executor,
        whose first ``working`` may carry a message); the agent clears it once it publishes
        ``working``."""

    @property
    def task_id(self) -> str:
        return self._run.task_id

    @property
    def context_id(self) -> str:
        return self._run.context_id

    @property
    def text(self) -> str:
        """The current message's text parts, joined by newlines."""
        return self.message.text

    @property
    def files(self) -> list[Part]:
        """The current message's file parts: bytes (``part.raw``, decoded) or a URL
        (``part.url``), each with its ``media_type`` and ``filename`` when the caller gave
        them. A filename is the caller's: never use it as a path unchecked."""
        return [p for p in self.message.parts if p.raw is not None or p.url is not None]

    @property
    def metadata(self) -> dict[str, Any]:
        """The request's metadata overlaid with the message's."""
        return {**self.request_metadata, **(self.message.metadata or {})}

    @property
    def owner(self) -> str:
        """Who owns the task: the caller's principal id within its tenant (an opaque key;
        equal for two runs exactly when the same caller sent them in the same tenant)."""
        return self._owner

    @property
    def tenant(self) -> str:
        """The tenant the task was created in (``""`` without one)."""
        return self._owner.partition(TENANT_SEPARATOR)[2]

    async def read_task(self, task_id: str) -> Task:
        """Read a task this run's caller may see: this one, or another of the same owner
        (principal and tenant), e.g. a message's ``referenceTaskIds``.

        Raises :class:`~scoped_a2a.protocol.errors.TaskNotFound` for a task that does not
        exist and, alike, for another owner's task.
        """
        if self._store is None:
            raise TaskNotFound(f"task {task_id!r} not found (this run has no store)")
        if task_id != self.task_id:
            await self._store.check_owner(task_id, self._owner)
        task, _ = await self._store.get(task_id)
        return task

    @property
    def detached(self) -> bool:
        """True when the run finishes whoever hangs up."""
        return self._run.detached

    def _status(
        self, state: TaskState, text: str | None, *, message: Message | None = None
    ) -> TaskStatusUpdateEvent:
        msg = message
        if text is not None:
            msg = agent_message(text, task_id=self.task_id, context_id=self.context_id)
        return TaskStatusUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            status=TaskStatus(state=state, message=msg, timestamp=utc_timestamp()),
        )

    async def working(self, text: str | None = None) -> None:
        """Report the task as working, optionally with a progress message."""
        await self._emit(self._status(TaskState.WORKING, text))

    async def artifact(
        self,
        text: str | None = None,
        *,
        data: Any = None,
        name: str | None = None,
        append: bool = False,
        last_chunk: bool = True,
        artifact_id: str | None = None,
        parts: Sequence[Part] | None = None,
    ) -> str:
        """Publish an artifact (or a chunk of one); returns its id.

        With ``append=True`` the parts extend the previous artifact (or ``artifact_id``), which
        is how a reply is streamed in chunks. ``parts``: any parts beyond ``text`` and
        ``data`` (files: ``Part(raw=..., media_type=..., filename=...)`` or ``Part(url=...)``),
        after them.
        """
        all_parts = []
        if text is not None:
            check_text(text)
            all_parts.append(Part(text=text))
        if data is not None:
            all_parts.append(Part(data=data))
        all_parts.extend(parts or ())
        if not all_parts:
            raise ValueError("an artifact needs text, data or parts")
        if artifact_id is None:
            artifact_id = (
                self._last_artifact_id if append and self._last_artifact_id else new_id()
            )
        self._last_artifact_id = artifact_id
        await self._emit(
            TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=Artifact(artifact_id=artifact_id, parts=all_parts, name=name),
                append=append,
                last_chunk=last_chunk,
            )
        )
        return artifact_id

    async def trajectory(self, event: Mapping[str, Any]) -> None:
        """Append one of the agent's own live-trajectory events (a JSON-able mapping)."""
        await self._emit(
            TrajectoryEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                data=dict(event),
                timestamp=utc_timestamp(),
            )
        )

    async def ask(self, text: str) -> str:
        """Ask the caller for input and wait for the reply; returns the reply's text.

        The task is ``input-required`` while waiting (blocking sends and streams return to
        their callers then). The caller answers with a message carrying this task's id; that
        message becomes ``ctx.message``.

        Errors: :class:`ParkedLimitReached` at once, before the question is published, when as
        many runs as the policy's ``max_parked_runs`` already wait for input;
        :class:`InputTimeout` (a TimeoutError) when no answer came within the policy's
        ``input_timeout``. Uncaught, either fails the task with its reason (``parked-limit``,
        ``input-timeout``). Cancellation (CancelTask, shutdown) ends the wait at once.
        """
        await self.interrupt(self._status(TaskState.INPUT_REQUIRED, text))
        return (await self.next_input()).text

    # --- lower-level events (what adapters of other frameworks use) -------------------------

    def _check_ids(self, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> None:
        if event.task_id != self.task_id or event.context_id != self.context_id:
            raise ValueError(
                f"an event for task {event.task_id!r} (context {event.context_id!r}) cannot be "
                f"published by the run of task {self.task_id!r} (context {self.context_id!r})")

    async def publish(self, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> None:
        """Append an event made whole by the caller (any parts: text, data, files).

        For the states a run passes through (``working``, ``submitted``) and for artifacts.
        An interrupted state goes through :meth:`interrupt`, an end is the agent's return value
        (an :class:`~scoped_a2a.runtime.outcome.Outcome`): both raise ValueError here, as does
        an event for another task or context. A run waiting for input that publishes anything
        is working again: it stops counting as parked.
        """
        self._check_ids(event)
        if isinstance(event, TaskStatusUpdateEvent):
            event = _as_agent_may_say(event)
            state = event.status.state
            if state.terminal or state.interrupted:
                raise ValueError(
                    f"publish() takes no {state.name.lower()} status: end the task by "
                    "returning an Outcome, or wait for input with interrupt()")
        self._stop_parking()
        await self._emit(event)

    async def interrupt(self, event: TaskStatusUpdateEvent) -> None:
        """Publish an ``input-required`` or ``auth-required`` status and start waiting.

        From here the run counts as parked (it is not cancelled when its holders leave, and it
        counts against ``max_parked_runs``) until :meth:`next_input` returns, the next
        :meth:`publish`, or the run ends. Raises :class:`ParkedLimitReached` before publishing
        anything when the cap on parked runs is reached.
        """
        self._check_ids(event)
        event = _as_agent_may_say(event)
        if not event.status.state.interrupted:
            raise ValueError("interrupt() takes an input-required or auth-required status")
        if self._parking is None:
            if self._run.parking_full:
                raise ParkedLimitReached(
                    "the agent needed an answer but cannot wait for one now: the server's "
                    f"limit of {int(self._run.parked_limit)} runs waiting for input is reached "
                    "(serve --max-parked-runs); send again later")
            self._parking = ExitStack()
            self._parking.enter_context(self._run.parking())
        try:
            await self._emit(event)
        except BaseException:
            self._stop_parking()
            raise

    async def next_input(self) -> Message:
        """Wait for the caller's next message (after :meth:`interrupt`); return it.

        It becomes ``ctx.message`` and is recorded with a ``working`` status. Raises
        :class:`InputTimeout` when none came within the input timeout; cancellation ends the
        wait at once. Either way the run stops counting as parked.
        """
        if self._parking is None:
            raise RuntimeError("next_input() waits after interrupt(): nothing was asked")
        try:
            with fail_after(self._input_timeout):
                self.message = await self._run.next_message()
        except TimeoutError:
            raise InputTimeout(
                f"no answer to the agent's question within {self._input_timeout:g} s (the "
                "server's input timeout, serve --input-timeout); send a new message to "
                "start again"
            ) from None
        finally:
            self._stop_parking()
        event = self._status(TaskState.WORKING, None, message=self.message)
        event.metadata = self._run.take_marker_note()  # a follow-up that detached the run
        await self._emit(event)
        return self.message

    def _stop_parking(self) -> None:
        if self._parking is not None:
            parking, self._parking = self._parking, None
            parking.close()

    async def run_abandonable(self, fn: Callable[[], Awaitable[T]], *, cancel_grace: float,
                              name: str, on_cancel: Callable[[], object] | None = None) -> T:
        """Run ``fn()`` as a task of the server nursery, so that code which may ignore
        cancellation (another framework's) cannot hold this run: on cancellation it is
        cancelled and waited for at most ``cancel_grace`` seconds, then abandoned (logged,
        left in the server nursery) and the cancellation goes on
        (:func:`~scoped_a2a.runtime.abandon.run_abandonable`; ``on_cancel`` is called before
        ``fn`` sees its cancellation). Outside a server, inline."""
        return await run_abandonable(self._nursery, fn, cancel_grace=cancel_grace, name=name,
                                     on_cancel=on_cancel)

    # --- calls to other agents (see calls.py) ----------------------------------------------

    def remaining(self) -> float | None:
        """Seconds left before the caller's deadline (deadline extension), or None without one."""
        return self._run.remaining()

    async def _record_call(self, entry: dict[str, Any]) -> None:
        # A status update whose metadata the store folds into this task's metadata.
        event = self._status(TaskState.WORKING, None)
        event.metadata = {DOWNSTREAM_KEY: [entry]}
        await self._emit(event)

    async def call(
        self, target: calls.Target, message: Message | str, *,
        metadata: Mapping[str, Any] | None = None, margin: float = calls.DEADLINE_MARGIN,
        cancel_timeout: float = calls.CANCEL_TIMEOUT,
    ) -> Task | Message:
        """Call another agent as part of this run; return its task once it ends or asks for
        input (or its direct reply message).

        ``target`` is the agent's base URL, its card, or an open ``A2AClient``. The call lives
        in this run's scope: when the run is cancelled (hang-up, CancelTask, deadline,
        shutdown) the request is abandoned and the downstream task, if it has not ended, gets
        a CancelTask (shielded, at most ``cancel_timeout`` s), so servers that ignore a hang-up
        stop too; the same happens when the call fails. With a deadline, the remaining budget
        minus ``margin`` travels as ``budgetMs``. The downstream task id is recorded in this
        task's metadata (``downstreamTasks``) as soon as it is known. Remote errors raise
        ``A2AError``; transport failures ``TransportError``.
        """
        return await calls.call(
            target, message, metadata=metadata, remaining=self.remaining,
            record=self._record_call, margin=margin, cancel_timeout=cancel_timeout)

    def stream(
        self, target: calls.Target, message: Message | str, *,
        metadata: Mapping[str, Any] | None = None, margin: float = calls.DEADLINE_MARGIN,
        cancel_timeout: float = calls.CANCEL_TIMEOUT,
    ) -> AbstractAsyncContextManager[calls.CallEvents]:
        """Call another agent as a stream: ``async with ctx.stream(url, msg) as events:``
        ``async for event in events``; ``events.task`` is the downstream task so far.

        Same rules as :meth:`call`; leaving the block with the downstream task unsettled
        (neither ended nor waiting for input) cancels it.
        """
        return calls.stream(
            target, message, metadata=metadata, remaining=self.remaining,
            record=self._record_call, margin=margin, cancel_timeout=cancel_timeout)


def _as_agent_may_say(event: TaskStatusUpdateEvent) -> TaskStatusUpdateEvent:
    """``event`` without the metadata keys only the server writes (a copy if it had one):
    :data:`~scoped_a2a.store.snapshot.SERVER_KEYS`.

    Whether the run is detached (``detachedBy``) is the server's word (the runtime's own
    ``working`` says it, store/snapshot.py folds it into the task), and so is the tree of calls
    (``downstreamTasks``, recorded by :meth:`RunContext.call`): an agent's status update that
    carries either key (a relay passing on a downstream agent's metadata, or its caller's; an
    adapted framework's event) must neither make the task look detached, nor erase a server
    rule's marker, nor add a task it never started to the tree a walker follows."""
    meta = event.metadata
    if not carries_server_keys(meta):
        return event
    return msgspec.structs.replace(event, metadata=server_keys_removed(meta))
