"""When the memory store packs its ended tasks, and which way: the queue of cooling tasks.

A task that just ended stays plain JSON (:class:`.packed.Frozen`) while it is among the
``HOT_TASKS`` newest: its readers (a blocking send's answer, a follower's last page) come right
after its end. Older ones are packed, oldest-ended first: a small task (at most
``SMALL_TASK_BYTES`` of JSON) is gathered with others and packed in a batch once they hold
``BATCH_BYTES`` (:mod:`.batched`); a larger one is packed on its own, in steps
(:class:`.packed.Packer`), about as many bytes per task end as the task that just ended held.

This module decides; the store applies. :meth:`Cooling.pack` returns the packed forms it made,
each with the plain one it replaces, and the store keeps those whose task is still there and
still plain (a task can be evicted while it cools). Nothing here awaits or does I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from .batched import InBatch, pack_batch
from .packed import Frozen, Packed, Packer

HOT_TASKS = 64
"""Ended tasks kept as plain JSON before the oldest of them is packed (compressed): a caller
reading the task that just ended (a blocking send's answer, a follower's last page) pays no
decompression, and packing happens one task end later than the reads that come with it."""

STEP_BYTES = 256 << 10
MAX_STEP_BYTES = 1 << 20
"""JSON bytes of large tasks packed per task end: at least ``STEP_BYTES``, and as much as the
task that just ended held, so packing keeps up with what ends, up to ``MAX_STEP_BYTES`` (a few
ms of zlib at most per call; a larger task is packed over several task ends and stays readable
meanwhile)."""

SMALL_TASK_BYTES = 4 << 10
"""An ended task with at most this much JSON (snapshot plus kept events) is packed in a batch;
a larger one on its own, in blocks."""

BATCH_BYTES = 32 << 10
"""JSON bytes of small tasks gathered before they are packed as one batch: enough to share one
stream's set-up and repetitions (~25 of the echo agent's tasks), few enough that reading one
decompresses in ~30 µs."""

Holder = TypeVar("Holder")
"""What the store keeps per task (its record); opaque here, handed back with the packed form."""

Packing = tuple[Holder, Frozen, "Packed | InBatch"]
"""A packed form made for the task held by ``Holder``, and the plain form it replaces."""


class Cooling(Generic[Holder]):
    """The ended tasks not packed yet, oldest-ended first, and the packing under way.

    ``plain(task_id)`` tells the holder and plain form of a task still in the store and still
    plain, or None (evicted meanwhile): such tasks are skipped.
    """

    def __init__(self, plain: Callable[[str], tuple[Holder, Frozen] | None]) -> None:
        self._plain = plain
        self._queue: deque[str] = deque()
        self._packer: tuple[Holder, Packer] | None = None  # the large task being packed
        self._gathered: list[str] = []  # small tasks for the next batch
        self._gathered_bytes = 0

    def ended(self, task_id: str) -> None:
        """Queue a task that just ended (plain) for packing."""
        self._queue.append(task_id)

    def pack(self, ended_size: int) -> list[Packing[Holder]]:
        """Pack what is due after a task of ``ended_size`` bytes of JSON ended.

        Returns the packed forms made, for the store to keep where the task is still there and
        still in the plain form given (it may be evicted while a large task is packed in steps).
        """
        made: list[Packing[Holder]] = []
        budget = min(MAX_STEP_BYTES, max(STEP_BYTES, ended_size))
        while budget > 0:
            if self._packer is None:
                self._packer = self._next_large(made)
                if self._packer is None:
                    break
            holder, packer = self._packer
            budget -= packer.step(budget)
            if packer.done is not None:
                self._packer = None
                made.append((holder, packer.frozen, packer.done))
        return made

    def _next_large(self, made: list[Packing[Holder]]) -> tuple[Holder, Packer] | None:
        """Take cooled tasks oldest first: gather the small ones (packing a batch into ``made``
        when it is full) and return a packer for the first large one; None once none is left."""
        while len(self._queue) > HOT_TASKS:
            task_id = self._queue.popleft()
            found = self._plain(task_id)
            if found is None:
                continue  # evicted meanwhile
            holder, frozen = found
            raw = frozen.raw_size()
            if raw > SMALL_TASK_BYTES:
                return holder, Packer(frozen)
            self._gathered.append(task_id)
            self._gathered_bytes += raw
            if self._gathered_bytes >= BATCH_BYTES:
                made += self._pack_gathered()
        return None

    def _pack_gathered(self) -> list[Packing[Holder]]:
        """Pack the gathered small tasks still in the store as one batch."""
        gathered = [found for found in map(self._plain, self._gathered) if found is not None]
        self._gathered, self._gathered_bytes = [], 0
        members = pack_batch([frozen for _, frozen in gathered])
        return [(h, f, m) for (h, f), m in zip(gathered, members, strict=True)]
