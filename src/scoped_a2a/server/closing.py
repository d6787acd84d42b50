"""Deadlines that shutdown cuts short: the cancel scopes of work a request may still be doing
when the server stops (reading its body, writing its final answer).

Such work has its own bound for ordinary times (a body's deadline, a write's timeout of 30 s),
and some of it is shielded (a final answer must not be cut by the caller's hang-up). At shutdown
that bound is too long: a client that stops reading a large answer would hold the process for
the whole write timeout, past any grace an orchestrator gives (measured on trio: 29 s with the
default timeout). :meth:`ClosingDeadlines.close` brings every such deadline, and that of every
scope entered later, to at most ``closing_seconds`` away.
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import Literal

import anyio


class ClosingDeadlines:
    """The open scopes of one kind of work, and when shutdown lets them end at the latest.

    Lives on one event loop (no lock). Entering and leaving scopes costs a set insert/remove.
    """

    def __init__(self, closing_seconds: float) -> None:
        self.closing_seconds = closing_seconds
        self.closing = False
        """:meth:`close` was called."""
        self._open: set[anyio.CancelScope] = set()
        self._none_open: anyio.Event | None = None  # made by wait_none_open

    def scope(self, seconds: float, *, shield: bool = False, lazy: bool = False
              ) -> ClosingScope:
        """A cancel scope ending ``seconds`` from now, or ``closing_seconds`` after shutdown
        began (after entering, for a scope entered once it had), whichever is first.
        Use once, with ``with``; it gives the :class:`anyio.CancelScope`.

        ``lazy``: the scope has no deadline and no shield until :meth:`ClosingScope.arm` gives
        them (``seconds`` from then): for work that usually ends without waiting (eager.py)."""
        return ClosingScope(self, seconds, shield, lazy)

    def close(self) -> None:
        """Shutdown: cut every open scope's deadline, and every later one's, to at most
        ``closing_seconds`` away. Calling it again changes nothing."""
        if self.closing:
            return
        self.closing = True
        for scope in self._open:
            self._cut(scope)

    @property
    def open(self) -> int:
        """How many scopes are open now."""
        return len(self._open)

    async def wait_none_open(self) -> None:
        """Return once no scope is open (callers bound the wait with their own scope)."""
        if not self._open:
            return
        if self._none_open is None or self._none_open.is_set():
            self._none_open = anyio.Event()
        await self._none_open.wait()

    def _cut(self, scope: anyio.CancelScope) -> None:
        scope.deadline = min(scope.deadline, anyio.current_time() + self.closing_seconds)


class ClosingScope:
    """One scope of :meth:`ClosingDeadlines.scope` (a plain class, not a generator-based
    context manager: one is entered for every request's body and final answer)."""

    __slots__ = ("_armed", "_deadlines", "_scope", "_seconds", "_shield")

    def __init__(self, deadlines: ClosingDeadlines, seconds: float, shield: bool,
                 lazy: bool = False) -> None:
        self._deadlines = deadlines
        self._seconds, self._shield = seconds, shield
        self._armed = not lazy
        self._scope = (anyio.CancelScope() if lazy else anyio.CancelScope(
            deadline=anyio.current_time() + seconds, shield=shield))

    def __enter__(self) -> anyio.CancelScope:
        scope = self._scope.__enter__()
        if self._armed:
            self._track()
        return scope

    def arm(self) -> None:
        """Give a lazy scope its deadline (``seconds`` from now) and shield (synchronous;
        call it inside the block, before the work first waits)."""
        if not self._armed:
            self._armed = True
            self._scope.deadline = anyio.current_time() + self._seconds
            self._scope.shield = self._shield
            self._track()

    def _track(self) -> None:
        deadlines = self._deadlines
        if deadlines.closing:
            deadlines._cut(self._scope)
        deadlines._open.add(self._scope)

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> bool:
        deadlines, scope = self._deadlines, self._scope
        if self._armed:
            deadlines._open.discard(scope)
            if not deadlines._open and deadlines._none_open is not None:
                deadlines._none_open.set()
        return bool(scope.__exit__(exc_type, exc_val, exc_tb))


class LazyDeadline:
    """A lazy scope as :meth:`ClosingDeadlines.scope` gives, for work no shutdown cuts short:
    no deadline and no shield until :meth:`arm`."""

    __slots__ = ("_scope", "_seconds", "_shield")

    def __init__(self, seconds: float, *, shield: bool = False) -> None:
        self._seconds, self._shield = seconds, shield
        self._scope = anyio.CancelScope()

    def __enter__(self) -> anyio.CancelScope:
        return self._scope.__enter__()

    def arm(self) -> None:
        self._scope.deadline = anyio.current_time() + self._seconds
        self._scope.shield = self._shield

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> bool:
        return bool(self._scope.__exit__(exc_type, exc_val, exc_tb))


class RequestScope:
    """One plain cancel scope around a whole request (JSON-RPC; HTTP+JSON with a body), armed
    (deadline, shield) only for the parts that must be bounded, and only if they wait
    (eager.py): the first read of the body (:meth:`reading`), then the final answer's write
    (:meth:`writing`).

    Why one scope: each anyio cancel scope entered costs ~27k instructions on asyncio and ~69k
    on trio (callgrind), a tenth of a blocking send's own work on trio; the read and the write
    each had their own. Only where no other scope is entered between this one and the write
    (a method that runs in the request's own task: a blocking send, ``watches_hangup``) may the
    write use it: a task group in between (the disconnect watcher's) would cancel the write on
    a hang-up, which the write's shield must keep out.

    Entered by the binding around everything it does for the request; each part's
    :class:`Phase` gives the scope its deadline (and shield) at the part's first suspension
    and takes them back when the part ends, so between parts the scope bounds nothing.
    Cancellation: the deadline of a part cancels this scope; the cancellation propagates out of
    the part (nothing in between swallows it) and the scope's exit swallows it, so the binding
    then knows the part (``read_expired``) and answers outside the scope. A part that returned
    just as its deadline passed counts as expired too (``Phase.expired``).
    """

    __slots__ = ("_read", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self._read: Phase | None = None

    def reading(self, deadlines: ClosingDeadlines, seconds: float) -> Phase:
        """The body's first read (its deadline ``seconds`` from its first wait)."""
        self._read = Phase(self.scope, deadlines, seconds, shield=False)
        return self._read

    def writing(self, deadlines: ClosingDeadlines, seconds: float) -> Phase:
        """The final answer's write (shielded, ``seconds`` from its first wait)."""
        return Phase(self.scope, deadlines, seconds, shield=True)

    @property
    def read_expired(self) -> bool:
        """The body's first read ended by (or as) its deadline passed."""
        return self._read is not None and self._read.expired


class Phase(ClosingScope):
    """One part of a :class:`RequestScope`: a lazy scope (eager.py) that arms the request's
    already entered scope instead of entering one of its own, and disarms it as the part ends.
    """

    __slots__ = ("expired",)

    def __init__(self, scope: anyio.CancelScope, deadlines: ClosingDeadlines, seconds: float,
                 shield: bool) -> None:
        self._deadlines, self._seconds, self._shield = deadlines, seconds, shield
        self._armed = False
        self._scope = scope
        self.expired = False

    def __enter__(self) -> anyio.CancelScope:
        return self._scope

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> Literal[False]:
        if self._armed:
            deadlines, scope = self._deadlines, self._scope
            self.expired = scope.cancel_called
            scope.deadline, scope.shield = math.inf, False
            deadlines._open.discard(scope)
            if not deadlines._open and deadlines._none_open is not None:
                deadlines._none_open.set()
        return False  # a cancellation goes on to the request's scope, which swallows it
