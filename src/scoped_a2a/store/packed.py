"""How the memory store keeps an ended task: as its JSON, then (once it has cooled) compressed.

(Small tasks are packed several to a stream instead: :mod:`.batched`.)

An ended task never changes, so it is kept as bytes, not objects: the snapshot's JSON and each
retained log event's JSON (:class:`Frozen`). Those bytes repeat themselves heavily (every event
of a task carries the same task id, context id, state names and field names), so once a task has
cooled (the store decides when) it is packed (:class:`Packed`): the snapshot compressed on its
own, and the log in blocks of about ``BLOCK_BYTES`` of JSON, each compressed with the snapshot as
its preset dictionary (the ids and strings the events repeat are already there), plus the end
offset and kind of each event. A small event then costs a few dozen bytes instead of its JSON plus
a bytes object's header (measured in docs/memory.md).

Reading a packed task decompresses the snapshot, and for a page of the log only the blocks that
page covers, once per call (never per event). Packing is split into steps of about ``STEP_BYTES``
of JSON (:class:`Packer`), so the store can spread a large task's packing over several calls
instead of stalling the event loop for it; until it is finished the task stays readable as
:class:`Frozen`. Nothing here does I/O or awaits, so there is nothing to cancel; ``zlib`` errors
cannot happen on data this module compressed itself.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Sequence

LEVEL = 1
"""zlib level: 1 packs the small events the store holds by thousands to ~1/15 of their JSON at
a third of level 6's time (measured on the chatter agent's tasks; 6 saves another ~5%)."""

BLOCK_BYTES = 64 << 10
"""JSON bytes per compressed block of log events: a page read decompresses only its blocks."""

DICT_BYTES = 32 << 10
"""The preset dictionary (the snapshot's tail) can be at most zlib's 32 KiB window."""

PACKED_TASK_OVERHEAD = 320
"""Bytes counted per packed task beyond its compressed bytes, offsets and kinds: the objects
holding them (measured with tracemalloc: about 300)."""

PACKED_BLOCK_OVERHEAD = 48
"""Bytes counted per compressed block: its bytes object's header and tuple slot."""


def _deflate(data: bytes, zdict: bytes = b"") -> bytes:
    """``data`` compressed at ``LEVEL``, with a window just large enough for it (and ``zdict``).

    Why not zlib's default 32 KiB window: its compressor state (~260 KiB) is above glibc's mmap
    threshold, so every call maps and faults in fresh pages, ~45 µs even for a 400-byte snapshot,
    more than the compression itself. A window the size of the input finds the same matches (a
    match cannot reach further back than the input and dictionary go) in a state small enough
    for the heap: ~3-10 µs for a small task, output of the same size. Decompression reads the
    window size from the stream's header, so nothing changes on the reading side.
    """
    wbits = min(15, max(9, (len(data) + len(zdict)).bit_length()))
    mem_level = max(1, wbits - 7)  # shrinks with the window: zlib's default 8 at 32 KiB
    pack = zlib.compressobj(LEVEL, zlib.DEFLATED, wbits, mem_level, zdict=zdict)
    return pack.compress(data) + pack.flush()


def _offsets(sizes: Sequence[int]) -> array[int]:
    """Cumulative end offsets, in the narrowest array type that holds the total."""
    total = sum(sizes)
    ends = array("H" if total < 1 << 16 else "I" if total < 1 << 32 else "Q")
    total = 0
    for size in sizes:
        total += size
        ends.append(total)
    return ends


class Frozen:
    """An ended task as its JSON: the snapshot and one bytes object per retained event."""

    __slots__ = ("events", "kinds", "snapshot")

    def __init__(self, snapshot: bytes, events: tuple[bytes, ...], kinds: bytes) -> None:
        self.snapshot = snapshot
        self.events = events
        self.kinds = kinds  # one byte per event: which type to decode it as

    def raw_size(self) -> int:
        return len(self.snapshot) + sum(map(len, self.events))

    def snapshot_json(self) -> bytes:
        return self.snapshot

    def event_size(self, i: int) -> int:
        return len(self.events[i])

    def page(self, lo: int, hi: int) -> tuple[bytes, list[bytes]]:
        """The snapshot's JSON and events ``lo``..``hi - 1``'s JSON."""
        return self.snapshot, list(self.events[lo:hi])


class Packed:
    """An ended task compressed (see the module docstring); reads return what Frozen did."""

    __slots__ = ("blocks", "ends", "kinds", "snapshot", "snapshot_len", "starts")

    def __init__(self, snapshot: bytes, snapshot_len: int, blocks: tuple[bytes, ...],
                 starts: array[int], ends: array[int], kinds: bytes) -> None:
        self.snapshot = snapshot  # compressed
        self.snapshot_len = snapshot_len
        self.blocks = blocks  # compressed, each with the snapshot's tail as preset dictionary
        self.starts = starts  # the index of each block's first event
        self.ends = ends  # each event's end offset in the whole log's JSON
        self.kinds = kinds

    def size(self) -> int:
        """The bytes this task holds, as the store's byte budget counts them."""
        return (
            len(self.snapshot) + sum(map(len, self.blocks)) + len(self.kinds)
            + self.ends.itemsize * len(self.ends) + self.starts.itemsize * len(self.starts)
            + PACKED_TASK_OVERHEAD + PACKED_BLOCK_OVERHEAD * len(self.blocks)
        )

    def snapshot_json(self) -> bytes:
        return zlib.decompress(self.snapshot, bufsize=self.snapshot_len)

    def event_size(self, i: int) -> int:
        return self.ends[i] - (self.ends[i - 1] if i else 0)

    def page(self, lo: int, hi: int) -> tuple[bytes, list[bytes]]:
        """The snapshot's JSON and events ``lo``..``hi - 1``'s JSON, decompressing the
        snapshot and the blocks holding those events once each."""
        snapshot = self.snapshot_json()
        if lo >= hi:
            return snapshot, []
        zdict = snapshot[-DICT_BYTES:]
        ends, starts = self.ends, self.starts
        out: list[bytes] = []
        b = _block_of(starts, lo)
        while len(out) < hi - lo:
            first = starts[b]
            last = starts[b + 1] if b + 1 < len(starts) else len(ends)
            unpack = zlib.decompressobj(zdict=zdict)
            raw = unpack.decompress(self.blocks[b]) + unpack.flush()
            base = ends[first - 1] if first else 0
            for i in range(max(lo, first), min(hi, last)):
                out.append(raw[(ends[i - 1] if i else 0) - base:ends[i] - base])
            b += 1
        return snapshot, out


def _block_of(starts: array[int], i: int) -> int:
    """The block holding event ``i`` (``starts`` ascending, ``starts[0] == 0``)."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= i:
            lo = mid
        else:
            hi = mid - 1
    return lo


class Packer:
    """Packs one :class:`Frozen` task in steps (``step``), so large ones never stall a caller.

    The first step compresses the snapshot, each later one blocks of events, until a step's
    budget of JSON bytes is spent; ``done`` then holds the :class:`Packed` task.
    """

    __slots__ = ("_blocks", "_next", "_snapshot", "_starts", "_zdict", "done", "frozen")

    def __init__(self, frozen: Frozen) -> None:
        self.frozen = frozen
        self.done: Packed | None = None
        self._blocks: list[bytes] = []
        self._starts = array("I")
        self._next = -1  # the next event to pack; -1: the snapshot first
        self._snapshot = self._zdict = b""

    def step(self, budget: int) -> int:
        """Compress about ``budget`` bytes of JSON (at least one piece); return the bytes
        compressed. ``done`` is set by the step that finishes."""
        frozen = self.frozen
        events = frozen.events
        spent = 0
        if self._next < 0:
            self._zdict = frozen.snapshot[-DICT_BYTES:]
            self._snapshot = _deflate(frozen.snapshot)
            spent, self._next = len(frozen.snapshot), 0
        while self._next < len(events) and (spent == 0 or spent < budget):
            first = i = self._next
            size = 0
            while i < len(events) and (i == first or size + len(events[i]) <= BLOCK_BYTES):
                size += len(events[i])
                i += 1
            self._blocks.append(_deflate(b"".join(events[first:i]), self._zdict))
            self._starts.append(first)
            self._next, spent = i, spent + size
        if self._next >= len(events):
            self.done = Packed(self._snapshot, len(frozen.snapshot), tuple(self._blocks),
                               self._starts, _offsets([len(e) for e in events]), frozen.kinds)
        return spent
