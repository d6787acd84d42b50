"""One run: one execution of the agent for one task, in its own cancel scope.

A run's lifetime is bounded by its owners. A detached run is owned by the server nursery alone. An
interactive run is also owned by its *holders*: every caller waiting on it (the blocking send or
stream that started it, each subscriber) holds it with ``with run.hold():``, and when the last hold
is released the run's scope is cancelled. Because a request's hold is released when the request's
scope exits, a hang-up (which cancels that scope) ends an interactive run within milliseconds,
while other subscribers keep it alive.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..protocol.on_disconnect import DETACHED_KEY
from ..protocol.trajectory import LogEvent
from ..protocol.types import Message

# --- the run watch ------------------------------------------------------------------------
# Read-only hooks through which a live view (the console) follows every run. The runner calls
# the watch, when one is set (``Runner.watch``), as a run starts, as a caller takes or releases
# a hold, as the run appends to its task's log, and as it ends. Without a watch each hook costs
# one ``is not None`` test. A watch only records: it must not raise, must not block (the hooks
# are synchronous and run inside the run's or the request's task), and must not change the run.

HOLD_KINDS = ("send", "stream", "subscribe")
"""Who holds an interactive run: a blocking send, the stream that started it, a subscriber."""


class RunWatch(Protocol):
    """Follows runs; every hook is synchronous and must not raise."""

    def started(self, run: Run) -> None:
        """A run started (``run.owner``, ``run.detach_reason`` are set)."""

    def held(self, run: Run, kind: str, delta: int) -> None:
        """A caller of ``kind`` (one of :data:`HOLD_KINDS`) took (+1) or released (-1) a hold;
        called before the run reacts to the release (so a hang-up is seen before its cancel)."""

    def appended(self, run: Run, event: LogEvent, position: int) -> None:
        """The run appended ``event`` to its task's log at ``position``."""

    def ended(self, run: Run, state: str, reason: str, seconds: float) -> None:
        """The run ended and its end is recorded: ``state`` is the terminal state's name
        (``completed``, ``canceled``...), ``reason`` why (``hang-up``, ``CancelTask``...)."""

    def closing(self) -> None:
        """The server began shutting down: no new run starts (a live view ends its feeds, so
        they do not hold the server's graceful shutdown open)."""


class Done:
    """Whether a run has ended: an :class:`anyio.Event` made only when someone waits.

    Every run has one and most are never waited on (a blocking send reads ``is_set``), so the
    event itself is made by the first :meth:`wait`."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        if self._set:
            await anyio.lowlevel.checkpoint()  # as anyio.Event.wait: always a checkpoint
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


class Hold:
    """``with run.hold(kind):`` (a plain class: every blocking send and stream takes one)."""

    __slots__ = ("_kind", "_run")

    def __init__(self, run: Run, kind: str) -> None:
        self._run, self._kind = run, kind

    def __enter__(self) -> None:
        self._run._held(self._kind, 1)

    def __exit__(self, *exc: object) -> None:
        self._run._held(self._kind, -1)


class ParkedRuns:
    """How many of one runner's runs wait in ``ctx.ask`` now, and how many may.

    A parked run holds its task, its messages and its stack for up to the input timeout while
    nobody waits on it, so their number is capped (``RunPolicy.max_parked_runs``).
    """

    __slots__ = ("count", "limit")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.count = 0

    @property
    def full(self) -> bool:
        return self.count >= self.limit


class Run:
    """Book-keeping of one run; the runner executes it. All methods are synchronous.

    ``parked_runs``: the runner's count of parked runs this run joins while it waits in
    ``ctx.ask`` (absent: a count of its own, without limit).
    """

    def __init__(
        self, task_id: str, context_id: str, detach_reason: str | None,
        parked_runs: ParkedRuns | None = None,
    ) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.detach_reason = detach_reason
        # What the task says of this run to a client giving up on it (protocol/on_disconnect.py
        # DETACHED_KEY): why the server runs it detached, None when the caller owns it. A
        # change the next ``working`` must carry to the task (set by the runner, taken by the
        # event that records the follow-up's message): ``marker_note``.
        self.marker: str | None = None
        self.marker_note: dict[str, str | None] | None = None
        self.scope = anyio.CancelScope()
        self.done = Done()
        self._cancel_reason: str | None = None
        self.cancelled_at: float | None = None  # monotonic time of the first cancel (metrics)
        self.canceled_by: str | None = None  # who asked for the first cancel (the console)
        self.owner = ""  # the task's owner key (principal and tenant), set by the runner
        self.watch: RunWatch | None = None  # the live view following this run (the console)
        # Why the store did not take this run's end at its last attempt (None: stored, or not
        # tried yet), and whether that cause lasts until an operator acts (a full disk). Set
        # before ``done``: a caller waiting for the end is then answered at once.
        self.end_error: str | None = None
        self.end_error_lasting = False
        self._parked = False  # waiting in ctx.ask for the caller's next message
        self._parked_runs = parked_runs if parked_runs is not None else ParkedRuns(math.inf)
        self.started = time.monotonic()
        self._holders = 0
        # The log position of the last interrupted status this run appended (0: none), and
        # the scopes of callers waiting for it to settle (``wake_when_settled``).
        self.settled_at = 0
        self.began = False  # the runner has begun executing it (its task's first step)
        self.end_reason: str | None = None  # why it ended (set by the runner as it records it)
        self._settle_waiters: list[anyio.CancelScope] | None = None
        # Made by the first ctx.ask: most runs never ask, and a stream pair costs a send.
        self._inbox_pair: (
            tuple[MemoryObjectSendStream[Message], MemoryObjectReceiveStream[Message]] | None
        ) = None

    @property
    def detached(self) -> bool:
        return self.detach_reason is not None

    @property
    def holders(self) -> int:
        return self._holders

    @property
    def parked(self) -> bool:
        """True while the run waits in ``ctx.ask`` for the caller's next message."""
        return self._parked

    def _set_parked(self, parked: bool) -> None:
        if parked != self._parked:
            self._parked = parked
            self._parked_runs.count += 1 if parked else -1

    def detach(self, reason: str) -> None:
        """Make the run detached from now on (a follow-up message asked for it)."""
        if self.detach_reason is None:
            self.detach_reason = reason

    def say_marker(self, marker: str | None, told: str | None) -> None:
        """Make ``marker`` the run's marker; when the task says ``told``, have the next
        ``working`` status (:meth:`take_marker_note`) say the change."""
        self.marker = marker
        self.marker_note = None if marker == told else {DETACHED_KEY: marker}

    def take_marker_note(self) -> dict[str, str | None] | None:
        """The metadata the event recording a follow-up's message carries (once), or None."""
        note, self.marker_note = self.marker_note, None
        return note

    @property
    def cancel_reason(self) -> str | None:
        """Why the run was cancelled: the first reason given, or ``deadline`` once it passed."""
        if self._cancel_reason is None and self.deadline_passed:
            return "deadline"
        return self._cancel_reason

    def cancel(self, reason: str, *, by: str | None = None) -> None:
        """Cancel the run's scope; the first reason given (and ``by`` whom) is the one recorded."""
        if self.cancel_reason is None and not self.done.is_set():
            self._cancel_reason = reason
            self.canceled_by = by
            self.cancelled_at = time.monotonic()
        self.scope.cancel()

    # --- deadline (the deadline extension) ------------------------------------------------

    def set_budget(self, seconds: float | None) -> None:
        """Give the run ``seconds`` from now: then its scope is cancelled (reason ``deadline``).

        Call inside the event loop (it reads the loop's clock). None leaves the run unbounded.
        """
        if seconds is not None:
            self.scope.deadline = anyio.current_time() + max(seconds, 0.0)

    @property
    def deadline_passed(self) -> bool:
        return math.isfinite(self.scope.deadline) and anyio.current_time() >= self.scope.deadline

    def remaining(self) -> float | None:
        """Seconds left before the run's deadline (0 once passed), or None without one."""
        if not math.isfinite(self.scope.deadline):
            return None
        return max(self.scope.deadline - anyio.current_time(), 0.0)

    def hold(self, kind: str = "send") -> Hold:
        """Keep an interactive run alive while the ``with`` body runs.

        Leaving the body by any route (return, error, cancellation of the caller) releases the
        hold; releasing the last hold of an interactive run that is not parked in ``ctx.ask``
        cancels it with reason ``hang-up``. Entering and leaving never checkpoint. ``kind``
        says who holds (``send``, ``stream``, ``subscribe``), for the run's watch only.
        """
        return Hold(self, kind)

    def _held(self, kind: str, delta: int) -> None:
        self._holders += delta
        if self.watch is not None:
            self.watch.held(self, kind, delta)
        if delta < 0:
            self._release_check()

    def _release_check(self) -> None:
        if self._holders == 0 and not self.detached and not self.parked and not self.done.is_set():
            self.cancel("hang-up")

    # --- waiting for the run to settle ----------------------------------------------------
    # A blocking send answers when its run *settles*: it appends an interrupted status (asks
    # for input) or ends. A caller in the request's own task waits for that inside a cancel
    # scope (while it reads its connection for a hang-up); the run cancels that scope as it
    # settles, so no task of its own has to watch the run.

    def wake_when_settled(self, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` when the run next settles (appends an interrupted status, or ends
        with its end recorded or given up on): at once if it has already ended."""
        if self.done.is_set():
            scope.cancel()
            return
        if self._settle_waiters is None:
            self._settle_waiters = []
        self._settle_waiters.append(scope)

    def stop_waking(self, scope: anyio.CancelScope) -> None:
        """Forget ``scope`` (its caller stopped waiting some other way: a hang-up)."""
        if self._settle_waiters is not None and scope in self._settle_waiters:
            self._settle_waiters.remove(scope)

    def settled(self, position: int | None) -> None:
        """The runner's call: the run appended an interrupted status at ``position``, or
        (None) ended. Cancels the scope of every caller waiting for that (synchronously)."""
        if position is not None:
            self.settled_at = position
        waiters, self._settle_waiters = self._settle_waiters, None
        if waiters is not None:
            for scope in waiters:
                scope.cancel()

    # --- ctx.ask support ------------------------------------------------------------------

    @property
    def _inbox(self) -> tuple[MemoryObjectSendStream[Message], MemoryObjectReceiveStream[Message]]:
        if self._inbox_pair is None:
            self._inbox_pair = anyio.create_memory_object_stream[Message](1)
        return self._inbox_pair

    def deliver(self, message: Message) -> None:
        """Hand the caller's next message to a run parked in ``ctx.ask``.

        The run stops counting as parked at once: the question is answered, and a second
        answer arriving before the agent wakes must be refused, not silently dropped (the
        inbox hands the first straight to the waiting agent, so a second would fit too).
        """
        self._set_parked(False)  # the answer frees its slot among the parked runs at once
        self._inbox[0].send_nowait(message)

    @property
    def parking_full(self) -> bool:
        """True when the runner's cap on parked runs is reached (this run may not park)."""
        return self._parked_runs.full

    @property
    def parked_limit(self) -> float:
        """The runner's cap on parked runs."""
        return self._parked_runs.limit

    @contextmanager
    def parking(self) -> Iterator[None]:
        """Mark the run as waiting for input (``ctx.ask``) for the ``with`` body.

        While parked the run is not cancelled for lack of holders: nobody waits on an
        input-required task, and it counts against the runner's cap on parked runs (check
        ``parking_full`` first). When the answer arrives, the usual rule applies again at once,
        so a resuming caller that already hung up still ends an interactive run. When the wait
        ends without an answer (the input timeout, a cancellation, or the agent's own deadline
        around ``ctx.ask``), the run stops counting as parked and the same rule applies: an
        interactive run nobody holds is cancelled (reason ``hang-up``), so an agent that catches
        the end of its wait cannot go on working for no one (detach the run to let it). An
        uncaught input timeout stays the outcome (``input-timeout``; see ``execution.execute_run``).
        """
        # A follow-up that arrived as an earlier ask timed out must not answer this question.
        while True:
            try:
                self._inbox[1].receive_nowait()
            except anyio.WouldBlock:
                break
        self._set_parked(True)
        try:
            yield
        finally:
            self._set_parked(False)
            self._release_check()

    async def next_message(self) -> Message:
        """The caller's next message (the caller bounds the wait with a deadline)."""
        return await self._inbox[1].receive()
