"""Calls from a run to other agents (``ctx.call``, ``ctx.stream``): part of the run, bounded by it.

A call executes in the run's cancel scope, so whatever ends the run (its caller hanging up,
CancelTask, its deadline, shutdown) ends the call: the HTTP request is abandoned, which a server
that cancels on disconnect (scoped-a2a) takes as a hang-up. A server that does not (the official
a2a-sdk) would keep working, so when a call ends before its downstream task did, a ``CancelTask``
for that task is sent under a shielded scope bounded by ``cancel_timeout``. Each downstream task's
id is recorded on the calling task (metadata ``downstreamTasks``) as soon as it is known, so the
tree of calls can be walked from the top.

Deadlines travel: when the run has one, the request carries ``budgetMs`` = the time left minus a
margin (the deadline extension), so the downstream run ends before this one gives up on it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..client.backoff import Backoff
from ..client.card import AgentCard, select_interface
from ..client.client import A2AClient
from ..client.errors import TransportError
from ..client.streams import EventStream
from ..client.wire import StreamEvent
from ..observe.propagation import inject_metadata
from ..protocol.deadline import BUDGET_KEY
from ..protocol.errors import A2AError, InvalidAgentResponse
from ..protocol.types import (
    Message,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from ..store.snapshot import apply_event

log = logging.getLogger("scoped_a2a.calls")

Target = str | AgentCard | A2AClient
"""Whom to call: the agent's base URL, its card, or an open :class:`A2AClient` (kept open)."""

DEADLINE_MARGIN = 0.05
"""Seconds kept back from the budget passed downstream: time for the answer to travel back."""

CANCEL_TIMEOUT = 2.0
"""Seconds the shielded CancelTask of an abandoned downstream task may take."""

_POLL = Backoff(initial=0.05, factor=2.0, cap=1.0, jitter=0.2)

Record = Callable[[dict[str, Any]], Awaitable[None]]


def outgoing_metadata(
    metadata: Mapping[str, Any] | None, remaining: float | None, margin: float
) -> dict[str, Any] | None:
    """The request metadata of a call: the caller's, plus the budget left when there is one."""
    meta = dict(metadata or {})
    if remaining is not None:
        meta[BUDGET_KEY] = max(int((remaining - margin) * 1000), 0)
    inject_metadata(meta)  # the run's trace context, for hops that lose headers
    return meta or None


@asynccontextmanager
async def open_client(target: Target) -> AsyncIterator[A2AClient]:
    """A client for ``target``; one made here is closed on exit (shielded, bounded)."""
    if isinstance(target, A2AClient):
        yield target
        return
    if isinstance(target, AgentCard):
        client = A2AClient(select_interface(target)[0], card=target)
    else:
        client = A2AClient(str(target))
    try:
        yield client
    finally:
        with anyio.move_on_after(1.0, shield=True):
            await client.aclose()


class Downstream:
    """The task one call started on another agent: recorded once known, cancelled if abandoned."""

    def __init__(self, client: A2AClient, record: Record, message: Message | str) -> None:
        self.client = client
        self.task: Task | None = None
        self.message: Message | None = None
        self._record = record
        # A follow-up to a downstream task (an answer to its question) was recorded already.
        self._recorded = message.task_id if isinstance(message, Message) else None

    @property
    def settled(self) -> bool:
        """True once the downstream task ended or waits for input (nothing to cancel then)."""
        if self.message is not None:
            return True
        if self.task is None:
            return False
        state = self.task.status.state
        return state.terminal or state.interrupted

    async def feed(self, event: Any) -> None:
        """Fold one event (or polled task) of the call into the downstream task's snapshot."""
        first = self.task is None
        if isinstance(event, Message) and first:
            self.message = event
        elif isinstance(event, Task):
            self.task = event
        elif isinstance(event, (TaskStatusUpdateEvent, TaskArtifactUpdateEvent)):
            if self.task is None:  # some 0.3 servers open a stream with a status update
                self.task = Task(id=event.task_id, context_id=event.context_id,
                                 status=_initial_status(event))
            apply_event(self.task, event)
        if first and self.task is not None and self.task.id != self._recorded:
            # Known before it is recorded: if recording is cancelled, the task still gets its
            # CancelTask on the way out.
            await self._record({"agent": self.client.url, "taskId": self.task.id,
                                "contextId": self.task.context_id})

    async def cancel_if_open(self, bound: float) -> None:
        """Send CancelTask for a known, unsettled downstream task; shielded, at most ``bound`` s.

        Errors are logged, never raised: the call is already ending for another reason.
        """
        if self.task is None or self.settled:
            return
        task_id = self.task.id
        with anyio.move_on_after(bound, shield=True) as scope:
            try:
                self.task = await self.client.cancel(task_id)
            except (A2AError, TransportError) as exc:
                # Already ended (TaskNotCancelable) is the usual case with a server that
                # cancelled on the hang-up; the rest is logged for the operator.
                log.debug("CancelTask of downstream task %s: %s", task_id, exc)
        if scope.cancelled_caught:
            log.warning("CancelTask of downstream task %s at %s got no answer within %.1fs",
                        task_id, self.client.url, bound)


def _initial_status(event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> TaskStatus:
    if isinstance(event, TaskStatusUpdateEvent):
        return event.status
    return TaskStatus(state=TaskState.WORKING)


async def call(
    target: Target, message: Message | str, *, metadata: Mapping[str, Any] | None,
    remaining: Callable[[], float | None], record: Record, margin: float = DEADLINE_MARGIN,
    cancel_timeout: float = CANCEL_TIMEOUT,
) -> Task | Message:
    """Send ``message`` to ``target`` and wait for the task to end or ask for input.

    Streams when the card offers streaming (the task id is known from the first event);
    otherwise sends with ``returnImmediately`` and polls the task. Returns the downstream task
    (or the agent's direct reply message). On cancellation or error, an unsettled downstream
    task is cancelled (shielded, bounded) before this re-raises.
    """
    async with open_client(target) as client:
        down = Downstream(client, record, message)
        try:
            streaming = (await client.card()).streaming
            # The budget is measured after the card fetch, just before the send: time spent
            # before it would otherwise count twice (here and downstream).
            meta = outgoing_metadata(metadata, remaining(), margin)
            if streaming:
                async with client.stream(message, metadata=meta) as events:
                    async for item in events:
                        await down.feed(item.event)
                        if down.message is not None:
                            return down.message
            else:
                await down.feed(await client.send(
                    message, metadata=meta, return_immediately=True))
            if down.message is not None:
                return down.message
            if down.task is None:
                raise InvalidAgentResponse(f"the agent at {client.url} answered without a task")
            failures = 0
            while not down.settled:  # no stream, or it closed before the task settled
                failures += 1
                await anyio.sleep(_POLL.delay(min(failures, 8)))
                down.task = await client.get_task(down.task.id)
            left = remaining()
            if left is not None and ended_by_deadline(down.task):
                # The downstream ran out of the budget we gave it, so ours ends within the
                # margin: wait for it, so this run too ends canceled with reason deadline
                # rather than answering with a half-done result.
                await anyio.sleep(left + margin)
            return down.task
        finally:
            await down.cancel_if_open(cancel_timeout)


def ended_by_deadline(task: Task) -> bool:
    """True when ``task`` ended canceled because its deadline passed (a scoped-a2a server)."""
    msg = task.status.message
    return (task.status.state is TaskState.CANCELED and msg is not None
            and (msg.metadata or {}).get("reason") == "deadline")


class CallEvents:
    """The events of a streamed call (``async for event in events``); each is folded into
    :attr:`task` (the downstream task as known so far) before it is handed out."""

    def __init__(self, events: EventStream, down: Downstream) -> None:
        self._events = events
        self._down = down

    @property
    def task(self) -> Task | None:
        return self._down.task

    def __aiter__(self) -> CallEvents:
        return self

    async def __anext__(self) -> StreamEvent:
        item = await self._events.__anext__()
        await self._down.feed(item.event)
        return item


@asynccontextmanager
async def stream(
    target: Target, message: Message | str, *, metadata: Mapping[str, Any] | None,
    remaining: Callable[[], float | None], record: Record, margin: float = DEADLINE_MARGIN,
    cancel_timeout: float = CANCEL_TIMEOUT,
) -> AsyncIterator[CallEvents]:
    """Stream a call: ``async with ctx.stream(url, msg) as events: async for e in events``.

    Leaving the block hangs up; a downstream task that has not settled by then is cancelled
    (shielded CancelTask, bounded by ``cancel_timeout``), whether the block returned, raised
    or was cancelled.
    """
    async with open_client(target) as client:
        down = Downstream(client, record, message)
        try:
            await client.card()  # fetched first, so the budget below is measured at the send
            meta = outgoing_metadata(metadata, remaining(), margin)
            async with client.stream(message, metadata=meta) as events:
                yield CallEvents(events, down)
        finally:
            await down.cancel_if_open(cancel_timeout)
