"""The pool's bound on operations at once (connection.py): a counting semaphore, FIFO when full,
that takes a free slot without a trip through the event loop.

Why not ``anyio.CapacityLimiter``: its ``acquire`` yields to the event loop every time (a
cancel-shielded checkpoint after taking the token, on asyncio and on trio), which cost a
third of the pool's own CPU per statement (measured: 125 -> 90 µs of CPU per one-statement
operation on asyncio, docs/postgres.md). Here a caller that is not cancelled takes a free
slot at once; the event loop runs other tasks at the operation's first wait on its socket.

Cancellation: a caller already cancelled raises at once, holding nothing; one cancelled while
waiting leaves the queue, and a slot handed to it in that moment goes to the next waiter. Each
``release`` hands the slot to the longest waiter, so none is overtaken.
"""

from __future__ import annotations

from collections import deque
from types import TracebackType

import anyio
import anyio.lowlevel


class Slots:
    """At most ``size`` holders at once (``async with``)."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: deque[anyio.Event] = deque()

    async def __aenter__(self) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        handed = anyio.Event()
        self._waiters.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():
                self._release()  # handed over as the cancel landed: to the next one
            else:
                self._waiters.remove(handed)
            raise

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the slot passes on: the count stays taken
        else:
            self._free += 1

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        return self._free
