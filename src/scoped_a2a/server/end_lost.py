"""Following a task to its end, unless its run ends and the store cannot take that end.

A run whose end the store refuses leaves its task ``working`` in the store, and the end is
retried in the background (runtime/ending.py) until the store takes it. For a cause that clears
by itself (another connection holding the SQLite file's lock, Redis failing over) a caller
following the task (a blocking send) waits for that retry and gets the real outcome. For one
that lasts until an operator acts (a full disk: ``ServerUnavailable.lasting``) it would wait
all that time with no word of why; the follower (``tail(..., lost=...)``) answers it at once
instead, with a retryable ServerUnavailable (:func:`end_not_stored`) that says what happened and
what to do. The end is still stored
once there is room, and a GetTask, or a resend of the same message (the same claim), reads it.
"""

from __future__ import annotations

from ..protocol.errors import ServerUnavailable
from ..runtime.run import Run


def end_not_stored(task_id: str, why: str) -> ServerUnavailable:
    """The caller's error for a run whose end the store did not take (``why``: the store's
    error; only its first clause, the cause, is kept: the rest is about other writes)."""
    cause = why.split(";")[0].strip().rstrip(".")
    return ServerUnavailable(
        f"task {task_id} ran, but its end could not be stored: {cause}. It is stored as soon "
        f"as the store can take it: read it with GetTask {task_id}, or send the same message "
        "again to wait for it")


def lost_end(run: Run) -> str | None:
    """Why ``run``'s end will not be stored until an operator acts (a full disk), once the run
    has finished with it so (``run.end_error_lasting``); None otherwise. The runner wakes the
    task's readers when that happens (``TaskStore.wake``), so a follower checking this after
    each wake answers at once, with no task of its own watching the run."""
    if run.done.is_set() and run.end_error is not None and run.end_error_lasting:
        return run.end_error
    return None


def lost_error(run: Run) -> BaseException | None:
    """The error for a caller following ``run``'s task when its end cannot be stored until an
    operator acts (:func:`end_not_stored`), or None."""
    why = lost_end(run)
    return end_not_stored(run.task_id, why) if why is not None else None
