"""Giving memory the process no longer uses back to the system after a burst (glibc only).

Why: a burst of large tasks (100 at once, each emitting 3.2 MiB) took a server from 70 MB to
about 500 MB of resident memory, and it stayed there after every task had ended and been
evicted, with ``--max-ended-bytes 32MiB`` (three waves: the same high-water mark each time,
not a leak). CPython hands freed buffers back to malloc, and glibc keeps freed heap memory
mapped: after it frees a large mmapped block it raises its mmap threshold (up to 32 MiB), so
later large buffers come from the heap too. ``malloc_trim(0)`` returns those free pages
(measured: 486 MB -> 78 MB, trio).

What :func:`trim_after_bursts` does: every ``interval`` seconds it asks malloc how much it holds
free (``mallinfo2``, microseconds), and calls ``malloc_trim(0)`` in a worker thread (about
0.1 s per GB, the event loop is not blocked) when that is at least ``threshold`` bytes and it
has not already trimmed that memory: a quarter of that more free since the last trim, or the
resident size grown by as much since (freed pages stay counted as free after a trim, so the
free figure alone would trim every time). Off where glibc's ``mallinfo2`` and ``malloc_trim``
are missing (musl, macOS, glibc < 2.33), or with ``SCOPED_A2A_MEMORY_TRIM=0``.

Cyclic garbage first. On asyncio, each of hypercorn's ended connections is a reference cycle
(its ``TCPServer``, ``H11Protocol``, streams, transport, task group and tasks: 28 objects a
connection, found with ``gc.DEBUG_SAVEALL``) that only the cyclic collector frees, and
gc_tuning.py's thresholds make a full collection wait for about two million allocations: a
quiet server after a burst never reached one. So a full ``gc.collect()`` runs before each trim
(on the event loop; it walks only what is not frozen, milliseconds after a burst), and before
the next few looks after a trim or a growth (:meth:`Trimmer.collect_first`). What else
stayed in use after some bursts was the memory store's pinned tasks, evicted now as their
readers let go (store/memory.py, ``_unpinned``; docs/memory.md).

Cancellation: the loop ends at once; a trim already running finishes in its thread (it cannot
be interrupted, and takes a fraction of a second). Errors: never raises.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
from typing import Any

import anyio

log = logging.getLogger("scoped_a2a.serve")

ENV = "SCOPED_A2A_MEMORY_TRIM"
"""Set to 0/off/false/no to leave the allocator alone."""

INTERVAL = 10.0
"""Seconds between looks at what malloc holds free."""

THRESHOLD = 64 << 20
"""Free bytes held by malloc from which a trim is worth its cost."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _libc() -> Any | None:
    """glibc with ``mallinfo2`` and ``malloc_trim``, or None."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def _resident() -> int:
    """The process's resident bytes (``/proc/self/statm``), or 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Trimmer:
    """The decisions of :func:`trim_after_bursts` (no I/O but the two reads; testable)."""

    SETTLE = 3
    """Looks after a trim that collect cycles first: a burst's tail may still sit in them."""

    def __init__(self, threshold: int = THRESHOLD, resident: int = 0) -> None:
        self.threshold = threshold
        self.free_after = 0  # what malloc held free, and the resident size, after the last trim
        self.resident_after = 0
        self.trims = 0
        self.collected_at = resident  # the resident size at the last full collection
        self.settling = 0

    def collect_first(self, resident: int) -> bool:
        """Whether to run a full collection before reading what malloc holds free.

        Memory held by garbage cycles (on asyncio, each ended connection of hypercorn is one,
        with the last response it wrote) is neither free to malloc nor returned until a full
        collection, which gc_tuning.py's thresholds make rare: a trim in a burst's tail, or a
        burst whose memory all sits in such cycles, would leave it resident (seen: 374 MB of a
        1 GB burst, 30 s after). So: after each trim for :attr:`SETTLE` looks, and whenever the
        resident size has grown by ``threshold`` since the last collection (at most once per
        such step, so a server whose memory is in real use is not collected at every look)."""
        return self.settling > 0 or resident - self.collected_at >= self.threshold

    def collected(self, resident: int) -> None:
        self.collected_at = resident
        self.settling = max(0, self.settling - 1)

    def due(self, free: int, resident: int) -> bool:
        """Whether to trim now, with ``free`` bytes held by malloc and ``resident`` bytes."""
        if free < self.threshold:
            return False
        if self.trims == 0:
            return True
        # A trim in a burst's tail leaves what is freed after it: a quarter of the threshold
        # more free, or pages back in use since, is worth another (measured under load: one
        # trim before the last tasks ended left 180 MB).
        step = self.threshold // 4
        return free - self.free_after >= step or resident - self.resident_after >= step

    def trimmed(self, free: int, resident: int) -> None:
        self.trims += 1
        self.free_after, self.resident_after = free, resident
        self.collected_at = resident
        self.settling = self.SETTLE


async def trim_after_bursts(interval: float = INTERVAL, threshold: int = THRESHOLD) -> None:
    """Run until cancelled, trimming malloc's free memory after bursts (module docstring).
    Returns at once where glibc's calls are missing or the ``SCOPED_A2A_MEMORY_TRIM`` switch is
    off."""
    libc = _libc()
    if libc is None:
        return
    trimmer = Trimmer(threshold, _resident())
    while True:
        await anyio.sleep(interval)
        collected = trimmer.collect_first(_resident())
        if collected:  # what cycles hold becomes free to malloc, and to trim
            found = gc.collect()
            trimmer.collected(_resident())
        free = int(libc.mallinfo2().fordblks)
        if not trimmer.due(free, _resident()):
            continue
        if not collected:  # cycles a burst left hold memory no trim can return
            found = gc.collect()
        before = _resident()
        await anyio.to_thread.run_sync(libc.malloc_trim, 0)
        after = _resident()
        trimmer.trimmed(int(libc.mallinfo2().fordblks), after)
        log.debug("malloc_trim: resident %d -> %d MiB (malloc held %d MiB free; gc.collect "
                  "found %d unreachable)", before >> 20, after >> 20, free >> 20, found)
