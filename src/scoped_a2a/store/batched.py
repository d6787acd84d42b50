"""Small ended tasks packed together: one compressed stream for a batch of tasks.

Packing a small task on its own (:mod:`.packed`) costs two zlib streams per task, and each stream
costs more to set up than a task of a kilobyte takes to compress: ~30 µs per task in a busy
server, about a fifth of our layer's CPU per blocking send. Small tasks also repeat each other
(the same field names, states and message shapes), which a stream of one task cannot use. So the
memory store gathers small cooled tasks and packs them together (which and when:
:mod:`.cooling`): each task's snapshot JSON then its events' JSON, end to end, compressed as one
stream (:class:`Batch`). Measured on the echo agent's tasks: ~1.5 µs per task to pack, ~130
compressed bytes per task instead of ~330.

Each task keeps a :class:`InBatch`: where its bytes lie in the batch's JSON, its events' end
offsets and kinds. It answers the reads :class:`.packed.Frozen` answers, from the same bytes.
Reading one task decompresses its whole batch (~30 µs for 32 KiB of JSON); the most recently
decompressed batch is kept, so reading the tasks of one batch in a row (ListTasks pages, which go
in ending order) decompresses it once.

A batch's bytes live as long as any of its tasks does. The store evicts oldest-ended first and
batches gather in ending order, so a batch's tasks go together; a task skipped by eviction (a
pinned one) can keep its batch's few KiB alive a little longer than its share counts. Nothing
here does I/O or awaits, so there is nothing to cancel.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Sequence

from .packed import Frozen, _deflate, _offsets

IN_BATCH_OVERHEAD = 240
"""Bytes counted per task in a batch beyond its share of the compressed bytes and the data of
its offsets and kinds: the objects holding them (its :class:`InBatch`, the array, the bytes;
measured with tracemalloc: ~200-230)."""


class Batch:
    """The compressed JSON of several small tasks, end to end."""

    __slots__ = ("blob", "raw_len")

    def __init__(self, blob: bytes, raw_len: int) -> None:
        self.blob = blob
        self.raw_len = raw_len

    def raw(self) -> bytes:
        """The batch's JSON (decompressed, or the copy kept from the last call)."""
        global _recent
        batch, raw = _recent
        if batch is not self:
            raw = zlib.decompress(self.blob, bufsize=self.raw_len)
            _recent = (self, raw)
        return raw


# The most recently decompressed batch and its JSON: reads of one batch's tasks in a row
# decompress it once. One slot, swapped whole (a tuple), so it holds at most one batch's JSON.
_recent: tuple[Batch | None, bytes] = (None, b"")


class InBatch:
    """One small ended task inside a :class:`Batch`; reads return what Frozen did."""

    __slots__ = ("batch", "ends", "kinds", "share", "snapshot_len", "start")

    def __init__(self, batch: Batch, start: int, snapshot_len: int, ends: array[int],
                 kinds: bytes, share: int) -> None:
        self.batch = batch
        self.start = start  # where the snapshot's JSON begins in the batch's JSON
        self.snapshot_len = snapshot_len
        self.ends = ends  # each event's end offset, counted from the end of the snapshot
        self.kinds = kinds
        self.share = share  # this task's part of the compressed bytes (for the byte budget)

    def size(self) -> int:
        """The bytes this task holds, as the store's byte budget counts them."""
        return self.share + IN_BATCH_OVERHEAD + len(self.kinds) + self.ends.itemsize * len(
            self.ends)

    def snapshot_json(self) -> bytes:
        return self.batch.raw()[self.start:self.start + self.snapshot_len]

    def event_size(self, i: int) -> int:
        return self.ends[i] - (self.ends[i - 1] if i else 0)

    def page(self, lo: int, hi: int) -> tuple[bytes, list[bytes]]:
        """The snapshot's JSON and events ``lo``..``hi - 1``'s JSON (one decompression)."""
        raw = self.batch.raw()
        base = self.start + self.snapshot_len
        ends = self.ends
        events = [raw[base + (ends[i - 1] if i else 0):base + ends[i]] for i in range(lo, hi)]
        return raw[self.start:base], events


def pack_batch(tasks: Sequence[Frozen]) -> list[InBatch]:
    """Compress ``tasks`` as one batch; return each one's :class:`InBatch`, in order."""
    raw = b"".join(part for frozen in tasks for part in (frozen.snapshot, *frozen.events))
    blob = _deflate(raw)
    batch = Batch(blob, len(raw))
    members: list[InBatch] = []
    start = 0
    for frozen in tasks:
        sizes = [len(e) for e in frozen.events]
        task_len = len(frozen.snapshot) + sum(sizes)
        # Rounded up, so the shares never count less than the batch holds.
        share = -(-len(blob) * task_len // len(raw)) if raw else 0
        members.append(InBatch(batch, start, len(frozen.snapshot), _offsets(sizes),
                               frozen.kinds, share))
        start += task_len
    return members
