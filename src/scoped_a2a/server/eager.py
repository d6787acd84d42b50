"""Bounding an await with a deadline only if it waits: the timer is armed at its first suspension.

A request's body is read, and its answer written, each within a deadline (a cancel scope with a
timer; the final answer's is shielded too). Usually neither waits: the server has the body
queued before the app runs, and an answer fits the socket's buffer. Arming a timer (and
cancelling it) then costs more than the work it bounds, a visible share of a small send.

:func:`bounded` enters a plain cancel scope (no deadline, no shield) and runs the awaitable's
first step inside it. If that step finishes the awaitable, no timer was ever armed. If it
suspends, the scope gets its deadline and shield (``arm``) *before* the suspension reaches the
event loop, and the awaitable is resumed exactly as a plain ``await`` would resume it. Since a
cancellation is only delivered at a suspension, the work is bounded (and shielded) from its
first wait on, as with a scope armed in advance. The scope is entered first, so scopes the
awaitable opens itself (trio's ``sleep``, a server's shielded send, a middleware's task group)
nest inside it as they must.

Cancellation and errors pass through unchanged: an exception raised in the first step
propagates as it would; one thrown in while suspended (the deadline's cancellation) goes into
the awaitable, which handles or raises it, and the scope's exit does what it always does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

T = TypeVar("T")


class LazyScope(Protocol):
    """A cancel scope given its deadline (and shield) by :meth:`arm`, not when entered."""

    def __enter__(self) -> Any: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> bool: ...

    def arm(self) -> None: ...


async def bounded(awaitable: Awaitable[T], scope: LazyScope) -> T | None:
    """Await ``awaitable`` inside ``scope``, armed only if it suspends (see the module).

    ``awaitable`` must not have started (a coroutine just made, such as ASGI's ``receive()``).
    Returns what it returns, or None when the scope swallowed a cancellation (its deadline
    passed while it waited: the awaitable was cancelled)."""
    with scope:
        steps = awaitable.__await__()
        try:
            first = steps.send(None)
        except StopIteration as done:
            return cast(T, done.value)
        scope.arm()
        return cast(T, await _Resumed(steps, first))
    return None


class _Resumed:
    """An awaitable that goes on with one already suspended once (yielding ``first``),
    delegating as ``await`` (``yield from``) does: what the event loop sends or throws in goes
    to it, what it yields goes to the event loop."""

    __slots__ = ("_first", "_steps")

    def __init__(self, steps: Generator[Any, Any, Any], first: Any) -> None:
        self._steps, self._first = steps, first

    def __await__(self) -> Generator[Any, Any, Any]:
        steps, yielded = self._steps, self._first
        self._first = None
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:
                try:
                    yielded = steps.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    yielded = steps.send(sent)
                except StopIteration as done:
                    return done.value
