"""Stream results encoded once per task position and dialect, shared by every subscriber.

N subscribers of one task must cost O(N) small state, not N copies of the task: before this
cache each stream encoded its own copy of the snapshot it starts with (200 stuck subscribers of a
task holding a 1 MiB message took the server from 124 to 915 MiB). A snapshot is "the task as of
position P", so (task id, P, dialect) names exactly one encoding; so does a logged event, whose
1.0 JSON the log already holds once (a 0.3 stream re-encodes it, hence cached here too).

The cache is bounded by entries and by bytes, oldest first out; an evicted encoding is simply
made again by the next stream that needs it. No I/O, no awaits: safe under cancellation.
"""

from __future__ import annotations

from collections import OrderedDict

from ..protocol.dialect import Dialect, Frame
from ..protocol.types import Task
from ..store.base import LogEntry


class FrameCache:
    """Recently sent stream results, keyed by (task id, position, kind, dialect version)."""

    def __init__(self, *, max_entries: int = 512, max_bytes: int = 64 << 20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._frames: OrderedDict[tuple[str, int, bool, str], Frame] = OrderedDict()
        self._bytes = 0

    def task(self, dialect: Dialect, task: Task, position: int) -> Frame:
        """The snapshot ``task`` (as of ``position``) as the first event of a stream."""
        key = (task.id, position, True, dialect.version)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._put(key, dialect.stream_task_frame(task))
        return frame

    def event(self, dialect: Dialect, task_id: str, entry: LogEntry) -> Frame:
        """One logged event as a stream result (the log's own encoding when no re-encoding)."""
        if not dialect.event_reencodes:
            return dialect.stream_event_frame(entry.event, entry.encoded)
        key = (task_id, entry.position, False, dialect.version)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._put(key, dialect.stream_event_frame(entry.event, entry.encoded))
        return frame

    def _put(self, key: tuple[str, int, bool, str], frame: Frame) -> Frame:
        size = len(frame.body)
        if size > self.max_bytes:  # why: caching it would evict everything else for one frame
            return frame
        self._frames[key] = frame
        self._bytes += size
        while len(self._frames) > self.max_entries or self._bytes > self.max_bytes:
            _, old = self._frames.popitem(last=False)
            self._bytes -= len(old.body)
        return frame

    def __len__(self) -> int:
        return len(self._frames)
