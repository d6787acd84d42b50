"""Wait for work that may ignore cancellation, without letting it hold its run forever.

A run's own code ends when its scope is cancelled: that is the contract of an agent here. Code
written for another framework may break it (an a2a-sdk executor that catches ``CancelledError``
and carries on). :func:`run_abandonable` runs such code as a task of the server nursery and waits
for it from the run: on cancellation it cancels the task and waits at most ``cancel_grace``
seconds more (shielded) for it to end; if it has not, the run stops waiting, so its end is
recorded and its slot freed, and the task is *abandoned*: it stays in the server nursery, logged
and counted, until it ends by itself or the server's own shutdown cancels the nursery (which it
may ignore again: a coroutine that swallows every cancellation can only be stopped by ending the
process). Structured concurrency still holds: the abandoned task has an owner, the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger("scoped_a2a.runs")

T = TypeVar("T")

abandoned_total = 0
"""How many tasks this process abandoned (they ignored cancellation past their grace)."""


class _Result:
    __slots__ = ("error", "returned", "value")

    def __init__(self) -> None:
        self.value: object = None
        self.error: BaseException | None = None
        self.returned = False


async def run_abandonable(
    nursery: TaskGroup | None, fn: Callable[[], Awaitable[T]], *, cancel_grace: float,
    name: str, on_cancel: Callable[[], object] | None = None,
) -> T:
    """Run ``fn()`` in ``nursery`` and return its result (or raise its exception).

    Cancelling this call cancels ``fn`` and waits up to ``cancel_grace`` seconds (shielded) for
    it to end, then re-raises the cancellation whether it ended or not (not ended: abandoned,
    see the module's docstring). ``on_cancel`` (synchronous) is called first, before ``fn``
    sees its cancellation: what must stop at once (a model connection), before ``fn``'s own
    cancellation handlers run; an exception from it is logged and the cancellation goes on.
    Without a nursery (an agent called outside a server), ``fn`` runs inline and nothing
    bounds it (``on_cancel`` is then called once ``fn`` has ended by its cancellation).
    """
    if nursery is None:
        try:
            return await fn()
        except anyio.get_cancelled_exc_class():
            if on_cancel is not None:  # inline: fn saw it first; still, what must stop stops
                on_cancel()
            raise
    done = anyio.Event()
    scope = anyio.CancelScope()
    result = _Result()

    async def child() -> None:
        try:
            with scope:
                result.value = await fn()
                result.returned = True
        except Exception as exc:  # handed to the waiter: the server nursery must not fail
            result.error = exc
        finally:
            done.set()

    nursery.start_soon(child, name=name)
    try:
        await done.wait()
    except anyio.get_cancelled_exc_class():
        if on_cancel is not None:
            try:
                on_cancel()
            except Exception:
                log.exception("%s: its on_cancel raised", name)
        scope.cancel()
        with anyio.move_on_after(cancel_grace, shield=True):
            await done.wait()
        if not done.is_set():
            global abandoned_total
            abandoned_total += 1
            log.error("%s ignored cancellation for %.1f s: abandoned (left running in the server "
                      "nursery; the run's end is recorded and its slot freed)", name, cancel_grace)
        raise
    error = result.error
    if error is not None:
        # Raised, not kept: the error's traceback holds the child's frame, whose ``result``
        # held the error (a cycle only the cyclic collector frees, with all the run's frames
        # hold), and raising it here adds this frame, whose ``error`` would hold it too.
        result.error = None
        try:
            raise error
        finally:
            del error
    if not result.returned:
        # Only the nursery's own cancellation ends the child without ours: it is on its way
        # to this task too, so the next checkpoint delivers it.
        await anyio.lowlevel.checkpoint()
        raise RuntimeError(f"{name} was cancelled by the server nursery")
    return result.value  # type: ignore[return-value]  # set by fn's return
