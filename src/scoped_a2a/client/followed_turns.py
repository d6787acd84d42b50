"""``FollowedTurns``: the part of a :class:`~.step.Step` that keeps the record of its turns.

A step's turns each get a follower (its trajectory, read into the sink's pages) started in the
step's one task group, so no follower can outlive the step; and each turn's links, meta and end
are written to the sink. :class:`~.step.Step` adds how a turn is sent and waited for.

Ending: when the body returns, followers are told the turn ended and may drain for at most
``drain_timeout`` seconds, then are cancelled; when the body raises or is cancelled, they are
cancelled at once. Every turn's end is recorded in the sink, under a shield with a deadline: the
state the follower read, else the state the step saw, else ``canceled`` (the step was cancelled)
or ``failed``. A follower's own failure is logged and never fails the turn or the step; nor does
a failing sink (each write is logged).

A turn given up on (cancelled, or ended by an error) before its task settled applies the abandon
rule (:mod:`.abandon`) here, in :meth:`FollowedTurns._run_turn`: shielded and bounded, so it is
safe while the turn is being cancelled; its outcome is kept on the turn (``Turn.abandoned``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup

from ..protocol.types import Message, Task, TaskState
from .abandon import Abandon, RemoteTask
from .backoff import Backoff
from .client import A2AClient
from .follower import FOLLOWER_TASK_PREFIX, Follower, Mode
from .pages import EVENT_FORMAT
from .sinks import MemorySink, StepSink

log = logging.getLogger("scoped_a2a.step")

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


class FollowedTurns:
    """An async context manager owning a step's followers and its records (see the module
    doc); the parameters are :class:`~.step.Step`'s."""

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

    async def __aenter__(self) -> Self:
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

    # --- turns' bookkeeping --------------------------------------------------------------

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
