"""Following a task to its end, unless its run ends and the store cannot take that end.

A run whose end the store refuses leaves its task ``working`` in the store, and the end is
retried in the background (runtime/ending.py) until the store takes it. For a cause that clears
by itself (another connection holding the SQLite file's lock, Redis failing over) a caller
following the task (a blocking send) waits for that retry and gets the real outcome. For one
that lasts until an operator acts (a full disk: ``ServerUnavailable.lasting``) it would wait
all that time with no word of why; :func:`follow_unless_lost` answers it at once instead, with
a retryable ServerUnavailable that says what happened and what to do. The end is still stored
once there is room, and a GetTask, or a resend of the same message (the same claim), reads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ..protocol.errors import ServerUnavailable
from ..runtime.run import Run

T = TypeVar("T")


def end_not_stored(task_id: str, why: str) -> ServerUnavailable:
    """The caller's error for a run whose end the store did not take (``why``: the store's
    error; only its first clause, the cause, is kept: the rest is about other writes)."""
    cause = why.split(";")[0].strip().rstrip(".")
    return ServerUnavailable(
        f"task {task_id} ran, but its end could not be stored: {cause}. It is stored as soon "
        f"as the store can take it: read it with GetTask {task_id}, or send the same message "
        "again to wait for it")


async def follow_unless_lost(run: Run, follow: Callable[[], Awaitable[T]]) -> T:
    """``await follow()`` and return its result (it returns when the task ends or waits for
    input). If ``run`` finishes first with its end not stored for a lasting cause
    (``run.end_error_lasting``), ``follow`` is cancelled and :func:`end_not_stored` is raised.

    ``follow`` should read what it needs (the final task) itself: leaving the watch is a
    checkpoint, and a store that evicts ended tasks (the memory store's byte budget) may evict
    this one meanwhile. Errors of ``follow`` propagate as themselves (not in an exception
    group). Cancellation cancels ``follow`` and the watch, and leaves nothing behind.
    """
    lost: str | None = None
    result: list[T] = []
    try:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal lost
                await run.done.wait()  # a stand-in's (a resend's) never is: follow decides
                if run.end_error is not None and run.end_error_lasting:
                    lost = run.end_error
                    tg.cancel_scope.cancel()

            tg.start_soon(watch)
            result.append(await follow())
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # Only follow raises (watch never does): its error, as itself.
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0],
                                                         BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise
    if not result:
        # Cancelled by the watch (an outside cancel would have raised out of the group).
        assert lost is not None
        raise end_not_stored(run.task_id, lost)
    return result[0]
