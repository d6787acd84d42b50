"""Bounding an await only if it waits: run it up to its first suspension, then enter the scope.

A request's body is read, and its answer written, each within a deadline (a cancel scope with a
timer). Usually neither waits: the server has the body queued before the app runs, and an
answer fits the socket's buffer. A deadline scope then costs more than the work it bounds
(making the scope, arming and cancelling its timer: ~10 µs, a visible share of a small send).
:func:`bounded` first runs the awaitable alone; if it finishes without suspending, no scope is
made at all. Only if it suspends is the scope entered, *before* control goes back to the event
loop, and the awaitable is resumed inside it, exactly as a plain ``await`` would resume it. So
nothing can wait unbounded: a deadline or a shield is in place before the first wait, and no
cancellation can land before it, since cancellation is only delivered at a suspension.

Cancellation and errors pass through unchanged: an exception raised in the first step
propagates as it would; one thrown in while suspended (a deadline's cancellation) is thrown into
the awaitable, which handles or raises it, and the scope's exit then does what it always does.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from contextlib import AbstractContextManager
from typing import Any, TypeVar

T = TypeVar("T")


async def bounded(coro: Coroutine[Any, Any, T],
                  scope: Callable[[], AbstractContextManager[Any]]) -> T | None:
    """Await ``coro``; if it suspends, the rest of it runs inside ``scope()`` (entered once,
    before the first suspension reaches the event loop). ``coro`` must not have started.

    Returns what ``coro`` returns, or None when ``scope`` swallowed a cancellation (a
    ``move_on_after``-style deadline passed: ``coro`` was cancelled)."""
    try:
        first = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except BaseException:
        coro.close()
        raise
    with scope():
        return await _Resumed(coro, first)  # type: ignore[no-any-return]
    return None


class _Resumed:
    """An awaitable that goes on with a coroutine already suspended once (yielding ``first``),
    delegating as ``await`` (``yield from``) does: what the event loop sends or throws in goes
    to the coroutine, what it yields goes to the event loop."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro, self._first = coro, first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self._coro, self._first
        self._first = None
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    yielded = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as done:
                    return done.value
