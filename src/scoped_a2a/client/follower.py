"""Followers: read one task's live trajectory into a sink while its turn runs.

A follower reads by cursor through the agent's trajectory extension, or, where the card offers
none, by an SSE subscription resumed with ``Last-Event-ID``. Its rules (docs/design.md, "Live
trajectory"):

- while the turn is open, a failed read (transport error, 5xx, a garbled answer) is retried
  after a capped exponential backoff with jitter;
- once the turn has ended (``follower.stop`` is set), one failed read ends following: the final
  task holds every event, so nothing is lost by giving up;
- after ``stop``, the first read that returns everything there is (no ``has_more``) ends
  following ("drained"); reading the turn's end (a terminal or interrupted status) ends it too;
- a task the agent no longer knows (TaskNotFound, HTTP 404/410) ends following at once, and so
  does a refusal no retry can fix (method not found, invalid params);
- cancellation ends it at once, on any backend and Python: every wait is an AnyIO checkpoint
  and every deadline a cancel scope (no ``wait_for``, whose 3.11 version swallows a cancel that
  lands as the read completes).

A follower never swallows cancellation and never retries after ``stop`` beyond one read, so a
step that owns it always ends.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, Literal, Protocol

import anyio
import msgspec

from ..protocol.errors import UnsupportedOperation
from ..protocol.trajectory import LoggedEvent
from ..protocol.types import Task, TaskState, TaskStatusUpdateEvent
from ..timeouts import fail_after
from .backoff import Backoff
from .errors import AgentTimeout, AgentUnreachable, is_task_gone, is_transient
from .pages import LivePage, PageSink
from .wire import StreamEvent

log = logging.getLogger("scoped_a2a.follower")

Mode = Literal["auto", "read", "subscribe"]

FOLLOWER_TASK_PREFIX = "scoped_a2a follower "
"""Task names of followers start with this (tests find leftover followers by it)."""


class BatchStream(Protocol):
    async def next_batch(self) -> list[StreamEvent]: ...


class TrajectorySource(Protocol):
    """What a follower reads from: an :class:`~.client.A2AClient`, or a test double."""

    async def offers_trajectory(self) -> bool: ...

    async def read_trajectory(
        self, task_id: str, after: int = 0, *, max_events: int | None = None,
        max_bytes: int | None = None,
    ) -> LivePage: ...

    def subscribe(
        self, task_id: str, *, last_event_id: int | None = None
    ) -> AbstractAsyncContextManager[Any]: ...


_live = 0


def live_followers() -> int:
    """How many followers are running now, in this process."""
    return _live


def _ends_turn(state: TaskState | None) -> bool:
    return state is not None and (state.terminal or state.interrupted)


class _Stop(Exception):
    """Internal: following is over (``Follower.outcome`` says why)."""


class Follower:
    """Follows one task's trajectory from ``after`` into ``sink``; :meth:`run` does the work.

    The attributes are the follower's record, readable during and after the run (also after a
    cancellation): ``cursor`` (last position delivered), ``state`` (last task state read),
    ``read_end`` (it read the turn's end), ``outcome`` (why it stopped), and the read counters.

    :param stop: set when the turn has ended (the follower then drains and stops).
    :param mode: ``read`` (cursor reads), ``subscribe`` (SSE), or ``auto`` (read when the agent's
        card offers the trajectory extension, else subscribe).
    :param poll_interval: seconds between cursor reads while the turn is open and quiet.
    :param read_timeout: deadline of one cursor read (a read past it has failed).
    """

    def __init__(
        self,
        source: TrajectorySource,
        task_id: str,
        sink: PageSink,
        *,
        after: int = 0,
        stop: anyio.Event | None = None,
        mode: Mode = "auto",
        poll_interval: float = 0.25,
        backoff: Backoff | None = None,
        read_timeout: float = 10.0,
        max_events: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.source = source
        self.task_id = task_id
        self.sink = sink
        self.stop = stop if stop is not None else anyio.Event()
        self.mode: Mode = mode
        self.poll_interval = poll_interval
        self.backoff = backoff or Backoff()
        self.read_timeout = read_timeout
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.cursor = after
        self.state: TaskState | None = None
        self.read_end = False
        self.outcome: str | None = None
        self.reads = 0
        self.failed_reads = 0
        self.failed_reads_after_stop = 0
        self.running = False
        self.done = anyio.Event()
        self._failures = 0

    # --- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow until one of the ending rules applies; returns then (see ``outcome``).

        Raises what the sink raises. Cancellation propagates at once (``outcome`` becomes
        ``cancelled``).
        """
        global _live
        if self.running or self.done.is_set():
            raise RuntimeError("a follower runs once")
        self.running = True
        _live += 1
        try:
            if self.mode == "auto":
                self.mode = "read" if await self._offers_trajectory() else "subscribe"
            if self.mode == "read":
                await self._follow_reads()
            else:
                await self._follow_subscription()
        except _Stop:
            pass
        except anyio.get_cancelled_exc_class():
            self.outcome = self.outcome or "cancelled"
            raise
        except BaseExceptionGroup as group:
            # On trio a cancel that lands while a read's own task group (httpx's connect)
            # fails at the same moment arrives grouped with that failure: it was cancelled.
            cancelled = group.subgroup(anyio.get_cancelled_exc_class()) is not None
            self.outcome = self.outcome or ("cancelled" if cancelled else "error")
            raise
        except BaseException:
            self.outcome = self.outcome or "error"
            raise
        finally:
            self.running = False
            _live -= 1
            self.done.set()

    async def _offers_trajectory(self) -> bool:
        while True:
            try:
                return await self.source.offers_trajectory()
            except Exception as exc:
                await self._failed(exc)

    def _end(self, outcome: str) -> _Stop:
        self.outcome = outcome
        return _Stop()

    async def _failed(self, exc: Exception) -> None:
        """Account for a failed read; raise _Stop when following must end, else back off."""
        if is_task_gone(exc):
            log.info("task %s: the agent no longer knows it; stop following", self.task_id)
            raise self._end("task-gone") from None
        if not is_transient(exc):
            log.warning("task %s: trajectory read refused (%s); stop following",
                        self.task_id, exc)
            raise self._end("refused") from None
        self.failed_reads += 1
        self._failures += 1
        if self.stop.is_set():
            self.failed_reads_after_stop += 1
            log.info("task %s: read failed after the turn ended (%s); stop following",
                     self.task_id, exc)
            raise self._end("read-failed") from None
        delay = self.backoff.delay(self._failures)
        log.debug("task %s: read failed (%s); retry in %.2fs", self.task_id, exc, delay)
        await self._pause(delay)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake as soon as the turn ends (the drain read should not wait)."""
        with anyio.move_on_after(seconds):
            await self.stop.wait()

    # --- cursor reads ---------------------------------------------------------------------

    async def _read(self) -> LivePage:
        # A follower woken in the same tick as its step's cancellation (the turn's end sets
        # ``stop``) would otherwise run on to the read's first checkpoint, which may come after
        # the request has been written: check first, so a cancelled follower reads nothing.
        await anyio.lowlevel.checkpoint_if_cancelled()
        self.reads += 1
        try:
            with fail_after(self.read_timeout):
                return await self.source.read_trajectory(
                    self.task_id, self.cursor, max_events=self.max_events,
                    max_bytes=self.max_bytes)
        except TimeoutError:
            raise AgentTimeout(f"trajectory read of task {self.task_id} timed out") from None

    async def _follow_reads(self) -> None:
        while True:
            stopped = self.stop.is_set()  # a page read after stop holds everything up to it
            try:
                page = await self._read()
            except Exception as exc:
                await self._failed(exc)
                continue
            self._failures = 0
            page, end_state = _cut_at_end(page)
            ended = end_state is not None
            if page.events:
                await self.sink(page)
            self.cursor = max(self.cursor, page.next)
            # The snapshot may already be past this turn (the next turn of the same task runs).
            self.state = end_state or page.state
            if page.has_more:
                continue
            if ended or (page.state is not None and page.state.terminal):
                self.read_end = True
                raise self._end("ended")
            if stopped:
                raise self._end("drained")
            await self._pause(self.poll_interval)

    # --- SSE subscription -------------------------------------------------------------------

    async def _follow_subscription(self) -> None:
        while True:
            stopped = self.stop.is_set()
            await anyio.lowlevel.checkpoint_if_cancelled()  # as in _read
            self.reads += 1
            try:
                async with AsyncExitStack() as stack:
                    try:
                        # The deadline covers opening only; an open stream may be quiet.
                        with fail_after(self.read_timeout):
                            events: BatchStream = await stack.enter_async_context(
                                self.source.subscribe(self.task_id, last_event_id=self.cursor))
                    except TimeoutError:
                        raise AgentTimeout(f"subscribing to {self.task_id} timed out") from None
                    while batch := await events.next_batch():
                        self._failures = 0
                        page = self._page(batch)
                        try:
                            await self.sink(page)
                        except Exception as exc:
                            # Not a failed read: carried past the handler below, then raised.
                            raise _SinkFailed from exc
                        self.cursor, self.state = page.next, page.state or self.state
                        if self.read_end:
                            raise self._end("ended")
            except _Stop:
                raise
            except _SinkFailed as failed:
                assert failed.__cause__ is not None
                raise failed.__cause__ from None
            except UnsupportedOperation:
                # Subscribing to a task that has ended: there is nothing more to read.
                raise self._end("ended") from None
            except Exception as exc:
                await self._failed(exc)
                continue
            # The agent closed the stream without the turn's end.
            if stopped or self.stop.is_set():
                raise self._end("drained")
            await self._failed(_StreamClosed(f"the subscription to {self.task_id} closed early"))

    def _page(self, batch: list[StreamEvent]) -> LivePage:
        after = position = self.cursor
        logged: list[LoggedEvent] = []
        state: TaskState | None = None
        for item in batch:
            # Agents without event ids (the a2a-sdk) get positions counted here.
            position = item.position if item.position is not None else position + 1
            ev = item.event
            if isinstance(ev, Task):
                state = ev.status.state
                if state.terminal:
                    self.read_end = True
            elif isinstance(ev, TaskStatusUpdateEvent):
                state = ev.status.state
                if _ends_turn(state):
                    self.read_end = True
            logged.append(LoggedEvent(position=position, kind=item.kind,
                                      event=msgspec.to_builtins(ev)))
        return LivePage(self.task_id, after, position, logged, state)


def _cut_at_end(page: LivePage) -> tuple[LivePage, TaskState | None]:
    """The page up to the turn's end (a terminal or interrupted status), and that end's state.

    Events after the end belong to the next turn of the same task (its own follower reads them).
    """
    for i, e in enumerate(page.events):
        if (
            e.kind == "statusUpdate"
            and isinstance(e.event, dict)
            and e.event.get("status", {}).get("state") in _ENDING_STATES
        ):
            if i + 1 < len(page.events):
                page = dataclasses.replace(
                    page, events=page.events[: i + 1], next=e.position, has_more=False)
            return page, TaskState(e.event["status"]["state"])
    return page, None


class _SinkFailed(Exception):
    """Internal: the sink raised (its error is the ``__cause__``) while a stream was open."""


class _StreamClosed(AgentUnreachable):
    """A subscription that closed before the turn's end (retried like a failed read)."""


_ENDING_STATES = frozenset(s.value for s in TaskState if _ends_turn(s))


async def follow_trajectory(
    source: TrajectorySource,
    task_id: str,
    sink: PageSink,
    *,
    after: int = 0,
    stop: anyio.Event | None = None,
    mode: Mode = "auto",
    poll_interval: float = 0.25,
    backoff: Backoff | None = None,
    read_timeout: float = 10.0,
    max_events: int | None = None,
    max_bytes: int | None = None,
) -> Follower:
    """Follow ``task_id``'s trajectory into ``sink`` until it ends; return the follower's record.

    ``sink`` is any async callable taking a :class:`~.pages.LivePage`. If it also has an
    ``end(state, next)`` coroutine method, that is called once the follower has read the end.
    See :class:`Follower` for the rules and the options. Cancellation ends it at once.
    """
    follower = Follower(
        source, task_id, sink, after=after, stop=stop, mode=mode, poll_interval=poll_interval,
        backoff=backoff, read_timeout=read_timeout, max_events=max_events, max_bytes=max_bytes,
    )
    await follower.run()
    end = getattr(sink, "end", None)
    if follower.read_end and end is not None:
        await end(follower.state, follower.cursor)
    return follower
