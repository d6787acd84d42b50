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

Ending: when the body returns, followers are told the turn ended and may drain for at most
``drain_timeout`` seconds, then are cancelled; when the body raises or is cancelled, they are
cancelled at once. Every turn's end is recorded in the sink, under a shield with a deadline: the
state the follower read, else the state the step saw, else ``canceled`` (the step was cancelled)
or ``failed``. A follower's own failure is logged and never fails the turn or the step.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..protocol.errors import InvalidAgentResponse, UnsupportedOperation
from ..protocol.types import Message, Task, TaskState, TaskStatusUpdateEvent
from .abandon import Abandon, RemoteTask
from .backoff import Backoff
from .client import A2AClient, user_message
from .errors import TransportError
from .follower import FOLLOWER_TASK_PREFIX, Follower, Mode
from .pages import EVENT_FORMAT
from .sinks import MemorySink, StepSink
from .wire import StreamEvent

log = logging.getLogger("scoped_a2a.step")

OnEvent = Callable[[StreamEvent], Awaitable[None] | None]


@dataclass
class Turn:
    """One turn of a step, as the step records it."""

    id: str
    task_id: str | None = None
    state: TaskState | None = None  # the state the step saw the turn end in
    follower: Follower | None = None
    over: bool = False  # the turn's wait has finished (returned, raised or was cancelled)
    aborted: TaskState | None = None  # CANCELED / FAILED when the turn did not see an end
    recorded: bool = False  # its end is in the sink
    remote: RemoteTask | None = None  # the task the turn started, as the turn has seen it
    abandoned: Abandon | None = None  # what giving up on it did (the abandon rule)


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


class Step:
    """An async context manager owning one conversation's followers (see the module doc).

    :param client: the agent's client (its card decides streaming and how to follow).
    :param sink: where trajectories go (default: a new :class:`MemorySink`, ``step.sink``).
    :param follow: follow each turn's trajectory (default True).
    :param drain_timeout: seconds followers may drain after the body returns.
    :param mode: how followers read (``auto``: the trajectory extension where offered).
    :param reconnects: how many times a turn resubscribes after its stream broke.
    :param record_timeout: deadline of the shielded writes that record a turn's end.
    """

    def __init__(
        self,
        client: A2AClient,
        *,
        sink: StepSink | None = None,
        follow: bool = True,
        drain_timeout: float = 2.0,
        mode: Mode = "auto",
        poll_interval: float = 0.25,
        backoff: Backoff | None = None,
        read_timeout: float = 10.0,
        reconnects: int = 2,
        record_timeout: float = 2.0,
        context_id: str | None = None,
    ) -> None:
        self.client = client
        self.sink: StepSink = sink if sink is not None else MemorySink()
        self.follow = follow
        self.drain_timeout = drain_timeout
        self.mode: Mode = mode
        self.poll_interval = poll_interval
        self.backoff = backoff or Backoff()
        self.read_timeout = read_timeout
        self.reconnects = reconnects
        self.record_timeout = record_timeout
        self.context_id = context_id
        self.turns: list[Turn] = []
        self.task: Task | None = None  # the last turn's task
        self._tg: TaskGroup | None = None
        self._in_turn = False
        self._offers_trajectory = False

    # --- lifetime ---------------------------------------------------------------------------

    async def __aenter__(self) -> Step:
        if self._tg is not None:
            raise RuntimeError("a Step is entered once")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        if exc_type is None:
            try:
                await self._drain()
            except BaseException as drain_exc:  # cancelled from outside while draining
                self._tg.cancel_scope.cancel()
                await self._close(type(drain_exc), drain_exc, drain_exc.__traceback__)
                raise
        self._tg.cancel_scope.cancel()
        return await self._close(exc_type, exc, tb)

    async def _drain(self) -> None:
        """Tell every follower its turn has ended; wait up to ``drain_timeout`` for them."""
        for turn in self.turns:
            if turn.follower is not None:
                turn.follower.stop.set()
        with anyio.move_on_after(self.drain_timeout):
            for turn in self.turns:
                if turn.follower is not None:
                    await turn.follower.done.wait()

    async def _close(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        try:
            if cancelled:
                return await self._tg.__aexit__(exc_type, exc, tb)
            # Followers never fail, so the group has nothing to add: the body's own exception
            # propagates as itself (not wrapped in an ExceptionGroup).
            await self._tg.__aexit__(None, None, None)
            return None
        finally:
            fallback = TaskState.CANCELED if cancelled else TaskState.FAILED
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.record_timeout):
                for turn in self.turns:
                    await self._record_end(turn, fallback)
                last = self.turns[-1].id if self.turns else None
                await self._sink("link", self.sink.link(last, None))

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
        turn's end: nothing is followed or recorded, and the task is returned as it is now.

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
                return task
            self._offers_trajectory = await self.client.offers_trajectory()
            self._start_follower(turn, task, after)
            return await self._poll_until_end(task, on_event)

        result = await self._run_turn(wait, link=not ended)
        assert isinstance(result, Task)
        return result

    async def _run_turn(
        self, go: Callable[[Turn], Awaitable[Task | Message]], *, link: bool = True,
    ) -> Task | Message:
        """Run one turn (``go`` sends it or takes it over), with its bookkeeping: numbering,
        links, and the record of its end, whichever way it ends."""
        turn = Turn(id=f"{len(self.turns) + 1:04d}")
        link_from = self.turns[-1].id if self.turns else None
        self.turns.append(turn)
        self._in_turn = True
        try:
            if link:
                await self._sink("link", self.sink.link(link_from, turn.id))
            result = await go(turn)
            if isinstance(result, Task):
                self.task, turn.state = result, result.status.state
                self.context_id = result.context_id
        except BaseException as exc:
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            turn.aborted = TaskState.CANCELED if cancelled else TaskState.FAILED
            if turn.remote is not None:  # shielded and bounded: safe while cancelled
                turn.abandoned = await turn.remote.abandon()
            raise
        finally:
            self._in_turn = False
            turn.over = True
            if turn.follower is not None:
                turn.follower.stop.set()
            if turn.follower is None or turn.follower.done.is_set():
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.record_timeout):
                    await self._record_end(turn, turn.aborted or TaskState.FAILED)
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
        turn.remote = remote = self.client.remote_task(msg, held=False, metadata=metadata)
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
        folded into ``remote``)."""
        failures = 0
        while not _ends(task.status.state):
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

    # --- followers and the sink -------------------------------------------------------------

    def _meta(self, turn: Turn, task: Task | None) -> dict[str, Any]:
        return {
            "format": EVENT_FORMAT,
            "turn": turn.id,
            "taskId": task.id if task else None,
            "contextId": task.context_id if task else self.context_id,
            "agent": self.client.url,
            "source": turn.follower.mode if turn.follower else None,
        }

    def _start_follower(self, turn: Turn, task: Task, after: int) -> None:
        turn.task_id = task.id
        self.context_id = task.context_id
        if not self.follow:
            self._tg_start(self._write_meta, turn, task)
            return
        mode = self.mode
        if mode == "auto":
            mode = "read" if self._offers_trajectory else "subscribe"
        turn.follower = Follower(
            self.client, task.id, self.sink.pages(turn.id), after=after, mode=mode,
            poll_interval=self.poll_interval, backoff=self.backoff,
            read_timeout=self.read_timeout,
        )
        self._tg_start(self._run_follower, turn, task)

    def _tg_start(self, fn: Callable[[Turn, Task], Coroutine[Any, Any, None]], turn: Turn,
                  task: Task) -> None:
        assert self._tg is not None
        self._tg.start_soon(fn, turn, task, name=f"{FOLLOWER_TASK_PREFIX}{task.id}")

    async def _write_meta(self, turn: Turn, task: Task) -> None:
        await self._sink("meta", self.sink.meta(turn.id, self._meta(turn, task)))

    async def _run_follower(self, turn: Turn, task: Task) -> None:
        follower = turn.follower
        assert follower is not None
        try:
            await self._write_meta(turn, task)
            await follower.run()
        except Exception:
            log.exception("the follower of turn %s (task %s) failed", turn.id, task.id)
        finally:
            # A follower cancelled by the step's exit is recorded there, with the step's outcome.
            if turn.over and follower.outcome != "cancelled":
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.record_timeout):
                    await self._record_end(turn, turn.aborted or TaskState.FAILED)

    async def _record_end(self, turn: Turn, fallback: TaskState) -> None:
        """Record how the turn ended, once: what the follower read, else what the step saw."""
        if turn.recorded:
            return
        turn.recorded = True
        f = turn.follower
        if f is not None and f.read_end:
            state: TaskState | None = f.state
        elif turn.state is not None:
            state = turn.state
        elif turn.task_id is None and turn.over and turn.aborted is None:
            state = None  # the agent answered with a message: there was no task
        else:
            state = turn.aborted or fallback
        await self._sink("end", self.sink.end(turn.id, state, f.cursor if f else 0))

    async def _sink(self, what: str, write: Awaitable[None]) -> None:
        """Run one sink write; a failing sink is logged, never fails the turn or the step."""
        try:
            await write
        except Exception:
            log.exception("the step's sink failed to record %s", what)
