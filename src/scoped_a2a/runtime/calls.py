"""Calls from a run to other agents (``ctx.call``, ``ctx.stream``): part of the run, bounded by it.

A call executes in the run's cancel scope, so whatever ends the run (its caller hanging up,
CancelTask, its deadline, shutdown) ends the call: the HTTP request is abandoned, which a server
that cancels on disconnect (scoped-a2a) takes as a hang-up. A server that does not (the official
a2a-sdk) would keep working, so when a call ends before its downstream task did, the abandon rule
applies (:mod:`scoped_a2a.client.abandon`, the one every caller-side owner uses): a
``CancelTask`` for that task under a shielded scope bounded by ``cancel_timeout``, unless its run
is detached (the caller's ``onDisconnect: continue``, or the server says so). Each downstream task's
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

from ..client.abandon import CANCEL_TIMEOUT as ABANDON_CANCEL_TIMEOUT
from ..client.abandon import RemoteTask
from ..client.backoff import Backoff
from ..client.card import AgentCard, select_interface
from ..client.client import A2AClient
from ..client.streams import EventStream
from ..client.wire import StreamEvent
from ..observe.propagation import inject_metadata
from ..protocol.deadline import BUDGET_KEY
from ..protocol.errors import InvalidAgentResponse
from ..protocol.types import Message, Task, TaskState

log = logging.getLogger("scoped_a2a.calls")

Target = str | AgentCard | A2AClient
"""Whom to call: the agent's base URL, its card, or an open :class:`A2AClient` (kept open)."""

DEADLINE_MARGIN = 0.05
"""Seconds kept back from the budget passed downstream: time for the answer to travel back."""

CANCEL_TIMEOUT = ABANDON_CANCEL_TIMEOUT
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
    """The task one call started on another agent: recorded once known, cancelled if abandoned
    (its state and the abandon rule: :class:`~scoped_a2a.client.abandon.RemoteTask`)."""

    def __init__(self, client: A2AClient, record: Record, message: Message | str,
                 remote: RemoteTask) -> None:
        self.client = client
        self.remote = remote
        self._record = record
        # A follow-up to a downstream task (an answer to its question) was recorded already.
        self._recorded = message.task_id if isinstance(message, Message) else None

    @property
    def task(self) -> Task | None:
        return self.remote.task

    @property
    def message(self) -> Message | None:
        return self.remote.message

    @property
    def settled(self) -> bool:
        """True once the downstream task ended or waits for input (nothing to cancel then)."""
        return self.remote.settled

    async def feed(self, event: Any = None) -> None:
        """Fold one polled task (or event) of the call into the downstream task's snapshot
        (None: a stream folded it already); record the task once it is known."""
        if event is not None:
            self.remote.see(event)
        task = self.remote.task
        if task is not None and self._recorded != task.id:
            self._recorded = task.id
            # Known before it is recorded: if recording is cancelled, the task still gets its
            # CancelTask on the way out. (A follow-up's task was recorded by its first call.)
            await self._record({"agent": self.client.url, "taskId": task.id,
                                "contextId": task.context_id})

    async def cancel_if_open(self) -> None:
        """Apply the abandon rule to an unsettled downstream task (shielded, bounded; its
        outcome is logged, never raised: the call is already ending for another reason)."""
        await self.remote.abandon()


def _downstream(client: A2AClient, record: Record, message: Message | str,
                metadata: dict[str, Any] | None, *, held: bool,
                cancel_timeout: float) -> Downstream:
    remote = client.remote_task(message, held=held, metadata=metadata, enabled=True)
    remote.timeout = cancel_timeout
    return Downstream(client, record, message, remote)


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
        down: Downstream | None = None
        try:
            streaming = (await client.card()).streaming
            # The budget is measured after the card fetch, just before the send: time spent
            # before it would otherwise count twice (here and downstream).
            meta = outgoing_metadata(metadata, remaining(), margin)
            down = _downstream(client, record, message, meta, held=streaming,
                               cancel_timeout=cancel_timeout)
            if streaming:
                async with client.stream(message, metadata=meta, owner=down.remote) as events:
                    async for _ in events:  # each folded into down.remote by the stream
                        await down.feed()
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
                await down.feed(await client.get_task(down.task.id))
            left = remaining()
            if left is not None and ended_by_deadline(down.task):
                # The downstream ran out of the budget we gave it, so ours ends within the
                # margin: wait for it, so this run too ends canceled with reason deadline
                # rather than answering with a half-done result.
                await anyio.sleep(left + margin)
            return down.task
        finally:
            if down is not None:
                await down.cancel_if_open()


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
        item = await self._events.__anext__()  # folded into the downstream task by the stream
        await self._down.feed()
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
        await client.card()  # fetched first, so the budget below is measured at the send
        meta = outgoing_metadata(metadata, remaining(), margin)
        down = _downstream(client, record, message, meta, held=True,
                           cancel_timeout=cancel_timeout)
        try:
            async with client.stream(message, metadata=meta, owner=down.remote) as events:
                yield CallEvents(events, down)
        finally:
            # Leaving the block ends the run's use of the call: an unsettled task is abandoned.
            await down.cancel_if_open()
