"""Following a task's log from a position: the one loop behind blocking sends and streams.

A blocking send, a stream and a subscription all do the same thing: read the log after a cursor,
hand each page to the caller, and stop at the first terminal or interrupted status (the point
where the A2A caller gets its answer). The reader holds no buffer: it sleeps on the store's
"something was appended" signal and re-reads from its cursor, so a slow reader only lags.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..protocol.types import TaskStatusUpdateEvent
from ..store.base import LogPage, TaskStore


def ends_stream(page: LogPage) -> int | None:
    """Position of the first event in ``page`` that ends a stream (terminal/interrupted), if any."""
    for entry in page.entries:
        ev = entry.event
        if isinstance(ev, TaskStatusUpdateEvent) and (
            ev.status.state.terminal or ev.status.state.interrupted
        ):
            return entry.position
    return None


async def tail(
    store: TaskStore,
    task_id: str,
    after: int,
    on_page: Callable[[LogPage], Awaitable[None]] | None = None,
    *,
    stop: Callable[[], BaseException | None] | None = None,
) -> int:
    """Deliver the log after ``after`` page by page until a terminal or interrupted status.

    ``on_page`` receives each page, cut after the ending event. Returns the ending position.
    (Streams follow the log in ``LogStream.follow``, server/log_stream.py, which also writes
    keep-alives by the bytes actually written.)
    Raises TaskNotFound if the task is evicted meanwhile. ``stop``: checked before each wait
    for more (the store's ``wake`` makes a waiter check again); an exception it returns is
    raised (a blocking send whose run's end cannot be stored). Cancellation ends it at once;
    nothing is left behind (the store keeps no per-reader state).
    """
    cursor = after
    while True:
        page = await store.read(task_id, cursor)
        if page.entries:
            end = ends_stream(page)
            if end is not None:
                page.entries = [e for e in page.entries if e.position <= end]
                page.next = end
                page.has_more = False
            if on_page is not None:
                await on_page(page)
            cursor = page.next
            if end is not None:
                return end
            if page.has_more:
                continue
        elif page.task.status.state.terminal:
            return cursor  # ended before our cursor: nothing more will ever come
        if stop is not None and (error := stop()) is not None:
            raise error
        await store.wait(task_id, cursor)
