"""The abandon rule: a caller-side owner that gives up on the task it started cancels it, unless
that task must survive its caller.

Owners are a :class:`~.step.Step`'s turns, :meth:`A2AClient.send` (blocking) and
:meth:`A2AClient.stream`, the CLI's ``send`` (a one-turn step) and a run's ``ctx.call`` hops. Each
keeps a :class:`RemoteTask` of what it started: the task as its events and answers show it, and
whether its run is detached. When the owner ends by cancellation (its deadline, a cancelled
scope, Ctrl-C) or by an exception while the task is known and has not settled (terminal, or
waiting for input), :meth:`RemoteTask.abandon` decides, in this order:

1. **detached**: the caller chose it (a ``returnImmediately`` of its own, metadata
   ``onDisconnect: continue``) or the server says so (task metadata ``detachedBy``, set by
   scoped-a2a for a ``--detach-metadata`` rule such as a CRM's ``inactivity_action``): nothing is
   sent, the work goes on. Sends the client turns into ``returnImmediately`` + polling itself
   (a step's polled mode, ``ctx.call``) are the caller's interactive sends, not detached.
2. **hang-up**: the owner's request was still open and the card declares that its server cancels
   on a hang-up (the on-disconnect extension, default ``cancel``, as scoped-a2a does): closing the
   request ends the run, nothing more is sent.
3. otherwise a ``CancelTask`` goes out, shielded, bounded by ``timeout`` (no other server measured
   cancels on a hang-up). Its outcome: ``canceled`` (the answer says so), ``requested`` (accepted,
   the answer still shows the task running), ``already-ended``, ``refused`` (another error) or
   ``timed-out``.

The outcome is returned as an :class:`Abandon`, logged, and attached by the owner where its caller
sees it (the turn, the exception's notes). Leaving a stream on purpose (``break``, closing its
``async with`` normally) is not an abandon. ``A2AClient(cancel_abandoned=False)`` switches the
rule off.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
import msgspec

from ..protocol.errors import A2AError, InvalidParams, TaskNotCancelable
from ..protocol.ids import new_id
from ..protocol.on_disconnect import (
    DETACHED_KEY,
    ON_DISCONNECT_EXTENSION_URI,
    on_disconnect_choice,
    with_marker,
)
from ..protocol.types import (
    ListTasksResponse,
    Message,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from ..store.snapshot import apply_event
from .card import AgentCard
from .errors import TransportError


class Canceller(Protocol):
    """What the abandon rule needs of a client (``A2AClient`` is one)."""

    url: str

    async def cancel(self, task_id: str, *, metadata: dict[str, Any] | None = None) -> Task: ...

    async def list_tasks(self, *, context_id: str | None = None) -> ListTasksResponse: ...


log = logging.getLogger("scoped_a2a.abandon")

CANCEL_TIMEOUT = 2.0
"""Seconds the shielded CancelTask of an abandoned task may take."""

Outcome = Literal[
    "canceled", "requested", "already-ended", "refused", "timed-out", "detached", "hang-up",
    "not-found"]


@dataclass(frozen=True, slots=True)
class Abandon:
    """What giving up on a remote task did: ``outcome`` (see the module doc) and a sentence."""

    task_id: str
    outcome: Outcome
    detail: str

    @property
    def run_goes_on(self) -> bool:
        """True when the remote run was left running on purpose (detached)."""
        return self.outcome == "detached"

    def __str__(self) -> str:
        return self.detail


def caller_detached(
    *, return_immediately: bool, request_metadata: dict[str, Any] | None,
    message_metadata: dict[str, Any] | None,
) -> str | None:
    """Why the caller itself asked its run to outlive it (None: it did not)."""
    if return_immediately:
        return "the caller asked not to wait (returnImmediately)"
    try:
        choice = on_disconnect_choice(request_metadata, message_metadata)
    except InvalidParams:  # the server refuses the send itself
        return None
    return "the caller asked onDisconnect: continue" if choice == "continue" else None


def cancels_on_hangup(card: AgentCard, *metadata: dict[str, Any] | None) -> bool:
    """True when the card declares that a hang-up cancels this request's run (scoped-a2a's
    on-disconnect extension, its default or the request's own ``onDisconnect: cancel``)."""
    for ext in card.capabilities.extensions or ():
        if ext.uri == ON_DISCONNECT_EXTENSION_URI:
            try:
                choice = on_disconnect_choice(*metadata)
            except InvalidParams:
                return False
            return (choice or (ext.params or {}).get("default")) == "cancel"
    return False


class RemoteTask:
    """The task one owner started on a remote agent, as the owner has seen it so far.

    :param held: the owner's request stays open while it waits (a blocking send, a stream), so
        closing it is a hang-up; False for a ``returnImmediately`` send that is polled.
    :param detached: why the caller asked the run to outlive it (:func:`caller_detached`).
    :param previous: the task a follow-up continues (a stream for it may begin with a status
        update, not the task: the a2a-sdk's does).
    :param enabled: False: :meth:`abandon` never sends anything.
    :param continues: the message continues a task that waits for input: that task's old
        input-required state (in its first snapshot) does not settle the new send.
    """

    def __init__(
        self, client: Canceller, *, held: bool, detached: str | None = None,
        previous: Task | None = None, enabled: bool = True, timeout: float = CANCEL_TIMEOUT,
        hangup_cancels: bool = False, continues: bool = False,
    ) -> None:
        self.client = client
        self.held = held
        self.detached = detached
        self.previous = previous
        self.enabled = enabled
        self.timeout = timeout
        self.hangup_cancels = hangup_cancels
        self.continues = continues
        self._moved = False  # a state other than input-required was seen since the send
        self.task: Task | None = None
        self.message: Message | None = None  # the agent's direct reply (no task)
        self.sent: Message | None = None  # the message sent (its ids find the task: bind)
        self.fresh_context = False  # its contextId was made for it: any task there is its
        self.abandoned: Abandon | None = None

    @property
    def settled(self) -> bool:
        """True once the task ended or waits for input, or the agent replied with a message."""
        if self.message is not None:
            return True
        if self.task is None:
            return False
        state = self.task.status.state
        return state.terminal or (state.interrupted and (self._moved or not self.continues))

    def see(self, event: object) -> Task | Message | None:
        """Fold one event (or a polled or answered task) into the task; return what the owner
        now knows (the task, or the direct reply message).

        A stream that begins with a status or artifact update (a continued task on the a2a-sdk;
        some 0.3 servers) starts from the task it continues, else from a bare one of that id.
        A message inside a task's stream is part of the conversation, not a reply.
        """
        if isinstance(event, Message):
            if self.task is None:
                self.message = event
        elif isinstance(event, Task):
            known, self.task = self.task, msgspec.structs.replace(event)
            if known is not None and known.id == event.id:
                # The send's answer said whether the server runs this turn detached; a later
                # snapshot (a poll, a resubscription) may have been read before the turn's
                # first event told the task, so it does not change that.
                self.task.metadata = with_marker(self.task.metadata, _marker(known))
        elif isinstance(event, (TaskStatusUpdateEvent, TaskArtifactUpdateEvent)):
            if self.task is None or self.task.id != event.task_id:
                self.task = self._start(event)
            apply_event(self.task, event)
        if self.task is not None and (not self.task.status.state.interrupted
                                      or self._new_status(self.task)):
            self._moved = True
        return self.message if self.message is not None else self.task

    def _new_status(self, task: Task) -> bool:
        """True when ``task``'s status is not the one the follow-up was sent to (a new
        question asked since counts as the task moving on, though it never left input-required
        between two polls)."""
        prev = self.previous
        if prev is None or prev.id != task.id:
            return False
        then, now = prev.status.timestamp, task.status.timestamp
        if then is not None and now is not None:
            return then != now
        # No timestamps (a peer may omit them): a question of its own is a new status.
        asked, asks = prev.status.message, task.status.message
        return asked is not None and asks is not None and asked.message_id != asks.message_id

    def _start(self, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> Task:
        prev = self.previous
        if prev is not None and prev.id == event.task_id:
            return msgspec.structs.replace(
                prev, history=list(prev.history or ()) or None,
                artifacts=list(prev.artifacts or ()) or None)
        status = (event.status if isinstance(event, TaskStatusUpdateEvent)
                  else TaskStatus(state=TaskState.WORKING))
        return Task(id=event.task_id, context_id=event.context_id, status=status)

    def bind(self, message: Message) -> Message:
        """The message to send for this owner: ``message``, or, when it starts a new
        conversation and the rule may need to cancel, a copy with a contextId of its own.

        If the owner gives up before any answer named the task (a blocking call, or a stream
        whose answer had not begun), :meth:`abandon` finds it with ``ListTasks`` in that
        context (every 1.0 server measured accepts a caller's new contextId and lists by it).
        """
        if (self.wants_id and message.task_id is None and message.context_id is None):
            message = msgspec.structs.replace(message, context_id=new_id())
            self.fresh_context = True
        self.sent = message
        return message

    @property
    def wants_id(self) -> bool:
        """True while giving up would need a CancelTask and the task is not known yet: a
        stream's first event, which names it, must then reach the owner even if the owner
        is cancelled while it is on its way (:attr:`.streams.EventStream.protect_first`)."""
        return (self.task is None and self.message is None and self.enabled
                and self.detached is None and not (self.held and self.hangup_cancels))

    def is_detached(self) -> str | None:
        """Why the run must outlive its caller (the caller's choice or the server's word)."""
        if self.detached is not None:
            return self.detached
        marker = _marker(self.task) if self.task is not None else None
        if marker:
            return f"the server runs it detached ({marker})"
        return None

    async def abandon(self) -> Abandon | None:
        """Apply the abandon rule once (module doc); None when there was nothing to abandon.

        Shielded and bounded by ``timeout``: safe to await from a cancelled owner. Errors of the
        CancelTask are outcomes, never raised: the owner is already ending for its own reason.
        """
        if self.abandoned is not None:
            return self.abandoned
        if self.wants_id and self.sent is not None and self.sent.context_id:
            found = await self._find(self.sent)  # no answer named the task yet
            if found is None:
                return self._said(Abandon(
                    "", "not-found", f"no task of message {self.sent.message_id} was found in "
                    f"context {self.sent.context_id} within {self.timeout:g}s (the agent had "
                    "not answered); if it started one, it may still run"))
            self.see(found)
        task = self.task
        if task is None or self.settled or not self.enabled:
            return None
        why = self.is_detached()
        if why is not None:
            result = Abandon(task.id, "detached", f"task {task.id} goes on: {why}")
        elif self.held and self.hangup_cancels:
            result = Abandon(task.id, "hang-up",
                             f"task {task.id} is cancelled by its server on the hang-up")
        else:
            result = await self._cancel(task.id)
        return self._said(result)

    def _said(self, result: Abandon) -> Abandon:
        self.abandoned = result
        bad = result.outcome in ("refused", "timed-out", "not-found")
        log.log(logging.WARNING if bad else logging.INFO, "gave up on %s at %s: %s",
                result.task_id or "a task", self.client.url, result.detail)
        return result

    async def _find(self, sent: Message) -> Task | None:
        """The task ``sent`` started, looked up with ``ListTasks`` in its context (shielded,
        at most ``timeout`` s, looking again while the agent may not have stored it yet).
        In a context made for the message any task is its; else the one whose history holds
        it. None when none turns up or the agent cannot list (0.3, an error)."""
        delay = 0.02
        with anyio.move_on_after(self.timeout, shield=True):
            while True:
                try:
                    page = await self.client.list_tasks(context_id=sent.context_id)
                except (A2AError, TransportError):
                    return None
                for task in page.tasks:
                    if self.fresh_context or any(
                            m.message_id == sent.message_id for m in task.history or ()):
                        return task
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.25)
        return None

    async def _cancel(self, task_id: str) -> Abandon:
        with anyio.move_on_after(self.timeout, shield=True) as scope:
            try:
                answer = await self.client.cancel(task_id)
            except TaskNotCancelable as exc:
                return Abandon(task_id, "already-ended",
                               f"task {task_id} had already ended ({exc.message})")
            except (A2AError, TransportError) as exc:
                return Abandon(task_id, "refused",
                               f"CancelTask of task {task_id} failed: {exc}; it may still run")
            self.task = answer
            state = answer.status.state
            if state is TaskState.CANCELED:
                return Abandon(task_id, "canceled", f"task {task_id} was canceled (CancelTask "
                               "acknowledged)")
            if state.terminal:
                return Abandon(task_id, "already-ended",
                               f"task {task_id} had already ended {state.name.lower()}")
            return Abandon(task_id, "requested", f"CancelTask of task {task_id} was accepted; "
                           f"the agent still shows it {state.name.lower()}")
        assert scope.cancelled_caught
        return Abandon(task_id, "timed-out", f"CancelTask of task {task_id} got no answer "
                       f"within {self.timeout:g}s; it may still run")


def note(exc: BaseException, abandoned: Abandon | None) -> None:
    """Attach what the abandon did to the exception the owner ends with (its notes)."""
    if abandoned is None:
        return
    with contextlib.suppress(AttributeError, TypeError):  # a type refusing attributes
        exc.add_note(f"scoped-a2a: {abandoned.detail}")


def _marker(task: Task) -> str | None:
    """What ``task`` says of its current run: why its server runs it detached, or None."""
    value = (task.metadata or {}).get(DETACHED_KEY)
    return value if isinstance(value, str) else None
