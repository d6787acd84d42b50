"""``Step``: one conversation with one agent, owning every task it starts.

::

    async with Step(client, sink=DirectorySink("out")) as step:
        task = await step.turn("summarise the report")
        task = await step.turn("now in French")

The ownership tree (docs/design.md)::

        step (one task group)
    └── turn
        ├── send + wait for the task's end      (in the caller's task)
        ├── follower of the turn's trajectory   (in the step's task group: cannot outlive it)
        └── the remote task: abandoned -> CancelTask   (shielded, bounded: client/abandon.py)

A turn sends its message as a stream when the agent streams (so its follower starts as soon as
the task exists, and a cancelled turn hangs up, which ends an interactive run), else with
``returnImmediately`` and polls ``GetTask``. A turn whose task needs input is continued by the
next turn (the agent's stream for it may begin with a status update rather than the task, as
the a2a-sdk's does). When the stream breaks, the turn resubscribes from the last position it saw,
a few times, before it fails.

A turn given up on (the step cancelled, its deadline passed, or an error ended the turn) before
its task settled applies the abandon rule (:mod:`.abandon`): the remote task is cancelled unless
its run is detached, and the outcome is kept on the turn (``Turn.abandoned``). A turn sent in
polled mode (``returnImmediately``) is still the caller's interactive turn.

Followers, the sink's records and the abandon rule's bookkeeping live in
:mod:`.followed_turns` (the base class); this module sends turns and waits for them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ..protocol.errors import InvalidAgentResponse, UnsupportedOperation
from ..protocol.types import Message, Task, TaskState, TaskStatusUpdateEvent
from .abandon import RemoteTask
from .client import user_message
from .errors import TransportError
from .followed_turns import FollowedTurns, Turn
from .wire import StreamEvent

__all__ = ["OnEvent", "Step", "Turn"]

log = logging.getLogger("scoped_a2a.step")

OnEvent = Callable[[StreamEvent], Awaitable[None] | None]


def _ends(state: TaskState) -> bool:
    return state.terminal or state.interrupted


def _ends_turn(item: StreamEvent) -> bool:
    """True for the event that ends a turn: a terminal or interrupted status update, or a
    terminal task. (A continued task's first snapshot still shows the old input-required
    state: that does not end the new turn.)"""
    ev = item.event
    if isinstance(ev, TaskStatusUpdateEvent):
        return _ends(ev.status.state)
    return isinstance(ev, Task) and ev.status.state.terminal


class Step(FollowedTurns):
    """An async context manager owning one conversation's turns and followers (see the
    module doc).

    :param client: the agent's client (its card decides streaming and how to follow).
    :param sink: where trajectories go (default: a new :class:`MemorySink`, ``step.sink``).
    :param follow: follow each turn's trajectory (default True).
    :param drain_timeout: seconds followers may drain after the body returns.
    :param mode: how followers read (``auto``: the trajectory extension where offered).
    :param reconnects: how many times a turn resubscribes after its stream broke.
    :param record_timeout: deadline of the shielded writes that record a turn's end.
    :param context_id: the conversation's context (default: the first answer's).
    """

    # --- turns ------------------------------------------------------------------------------

    async def turn(
        self, message: Message | str, *, on_event: OnEvent | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task | Message:
        """Send one turn and wait for its task to end or need input; return the final task
        (or the agent's direct reply message).

        The turn's follower runs in the step's task group and is told the turn ended when this
        returns (or raises). ``on_event`` is called with every event of the turn's stream.
        Raises what the send raises (transport errors after the reconnects, remote errors).
        """
        if self._tg is None:
            raise RuntimeError("use a Step as `async with Step(client) as step:`")
        if self._in_turn:
            raise RuntimeError("a step runs one turn at a time")
        msg = user_message(message) if isinstance(message, str) else message
        previous = self.task
        if previous is not None and previous.status.state.interrupted:
            msg.task_id, msg.context_id = previous.id, previous.context_id
        elif msg.context_id is None:
            msg.context_id = self.context_id

        async def send(turn: Turn) -> Task | Message:
            card = await self.client.card()
            self._offers_trajectory = await self.client.offers_trajectory()
            if card.streaming:
                return await self._streamed(turn, msg, on_event, metadata)
            return await self._polled(turn, msg, on_event, metadata)

        return await self._run_turn(send)

    async def rejoin(
        self, task_id: str, *, after: int = 0, ended: bool = False,
        on_event: OnEvent | None = None,
    ) -> Task:
        """Take over, as this step's next turn, a turn whose message was sent before (by an
        earlier attempt of this step, in a process that died): nothing is sent.

        The turn's follower starts at position ``after`` (where the earlier attempt's follower
        stood) and the turn waits, polling ``GetTask``, for ``task_id`` to end or need input, as
        :meth:`turn` does; the turn's records in the sink are written again (a sink that keeps
        files, like :class:`~.sinks.DirectorySink` opened with ``resume=True``, takes identical
        records as no-ops). With ``ended=True`` the earlier attempt had already recorded the
        turn's end: nothing is followed or recorded, and the task is returned once it ends or
        needs input (at once, usually; an attempt that gave up on a detached task, say on a
        heartbeat timeout, recorded its end while the task ran on).

        Cancellation and errors are those of :meth:`turn`.
        """
        if self._tg is None:
            raise RuntimeError("use a Step as `async with Step(client) as step:`")
        if self._in_turn:
            raise RuntimeError("a step runs one turn at a time")

        async def wait(turn: Turn) -> Task | Message:
            task = await self.client.get_task(task_id)
            if ended:
                turn.task_id, turn.recorded = task.id, True
                self.context_id = task.context_id
                return await self._poll_until_end(task, on_event)
            self._offers_trajectory = await self.client.offers_trajectory()
            self._start_follower(turn, task, after)
            return await self._poll_until_end(task, on_event)

        result = await self._run_turn(wait, link=not ended)
        assert isinstance(result, Task)
        return result

    async def _streamed(
        self, turn: Turn, msg: Message, on_event: OnEvent | None,
        metadata: dict[str, Any] | None,
    ) -> Task | Message:
        task: Task | Message | None = None
        last: int | None = None
        turn.remote = self.client.remote_task(
            msg, held=True, metadata=metadata, previous=self._continued(msg))
        try:
            async with self.client.stream(msg, metadata=metadata, owner=turn.remote) as events:
                async for item in events:
                    task = await self._take(turn, task, item, on_event)
                    if isinstance(task, Message):
                        return task
                    last = item.position if item.position is not None else last
                    if _ends_turn(item):
                        return task
        except TransportError:
            if task is None or isinstance(task, Message):
                raise
            log.info("turn %s: the stream broke; resubscribing", turn.id)
            return await self._resume(turn, task, last, on_event, failures=1)
        if task is None:
            raise InvalidAgentResponse("the agent closed the stream without a task or message")
        if isinstance(task, Message):
            return task
        return await self._resume(turn, task, last, on_event, failures=0)

    async def _resume(
        self, turn: Turn, task: Task, last: int | None, on_event: OnEvent | None,
        *, failures: int,
    ) -> Task:
        """Resubscribe after the stream broke or closed early, until the task ends."""
        while True:
            if failures > self.reconnects:
                raise TransportError(
                    f"lost the stream of task {task.id} and could not resubscribe "
                    f"({self.reconnects} attempts)")
            if failures:
                await anyio.sleep(self.backoff.delay(failures))
            try:
                async with self.client.subscribe(task.id, last_event_id=last) as events:
                    async for item in events:
                        assert turn.remote is not None
                        turn.remote.see(item.event)  # a subscription folds nothing itself
                        taken = await self._take(turn, task, item, on_event)
                        assert isinstance(taken, Task)
                        task = taken
                        last = item.position if item.position is not None else last
                        if _ends_turn(item):
                            return task
            except UnsupportedOperation:  # the task ended meanwhile: read it
                return await self.client.get_task(task.id)
            except TransportError as exc:
                log.info("turn %s: resubscribing failed: %s", turn.id, exc)
            failures += 1

    async def _take(
        self, turn: Turn, task: Task | Message | None, item: StreamEvent,
        on_event: OnEvent | None,
    ) -> Task | Message:
        """Take one stream event (already folded into the turn's task by its stream); start
        the follower at the first.

        The first event is the task, or the agent's direct reply message, or (a continued
        task, on the a2a-sdk) a status or artifact update of the task: folded into the task
        the turn continues. Anything else first is refused, naming it and the agent.
        """
        if on_event is not None:
            maybe = on_event(item)
            if maybe is not None:
                await maybe
        remote = turn.remote
        assert remote is not None
        known = remote.message if remote.message is not None else remote.task
        if task is None:
            if known is None:
                raise InvalidAgentResponse(
                    f"the stream from {self.client.url} began with {item.kind}, not a task, "
                    "a message or an update of a task")
            if isinstance(known, Message):
                await self._sink("meta", self.sink.meta(turn.id, self._meta(turn, None)))
                return known
            self._start_follower(turn, known, self._follow_from(item, known))
            return known
        return remote.task if remote.task is not None else task

    def _continued(self, msg: Message) -> Task | None:
        """The task ``msg`` continues, when the step knows it."""
        prev = self.task
        return prev if prev is not None and msg.task_id == prev.id else None

    def _follow_from(self, item: StreamEvent, task: Task) -> int:
        """Where the follower of a streamed turn starts: the first event's position, else
        (a continued task whose stream has no positions) where the last turn's stood."""
        if item.position is not None:
            return item.position
        prev = self.turns[-2].follower if len(self.turns) > 1 else None
        if prev is not None and prev.task_id == task.id:
            return prev.cursor
        return 0

    async def _polled(
        self, turn: Turn, msg: Message, on_event: OnEvent | None,
        metadata: dict[str, Any] | None,
    ) -> Task | Message:
        # Polled on the caller's behalf: still its interactive turn (cancelled if given up on).
        turn.remote = remote = self.client.remote_task(msg, held=False, metadata=metadata,
                                                       previous=self._continued(msg))
        result = await self.client.send(msg, return_immediately=True, metadata=metadata)
        remote.see(result)
        if isinstance(result, Message):
            await self._sink("meta", self.sink.meta(turn.id, self._meta(turn, None)))
            return result
        after = 0
        if msg.task_id and self.turns[:-1] and self.turns[-2].follower is not None:
            after = self.turns[-2].follower.cursor
        self._start_follower(turn, result, after)
        return await self._poll_until_end(result, on_event, remote)

    async def _poll_until_end(self, task: Task, on_event: OnEvent | None,
                              remote: RemoteTask | None = None) -> Task:
        """Poll ``GetTask`` until the task ends or needs input; return it (each read is also
        folded into ``remote``, whose word decides: a follow-up's answer may predate it and
        still show the question it answers)."""
        failures = 0
        while not (remote.settled if remote is not None else _ends(task.status.state)):
            await anyio.sleep(self.backoff.delay(failures) if failures else self.poll_interval)
            try:
                task = await self.client.get_task(task.id)
                failures = 0
                if remote is not None:
                    remote.see(task)
            except TransportError:
                failures += 1
                if failures > self.reconnects:
                    raise
            if on_event is not None:
                maybe = on_event(StreamEvent(task, None))
                if maybe is not None:
                    await maybe
        return task
