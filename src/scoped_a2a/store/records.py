"""How the stores that keep logs as bytes encode them (no I/O): each event is its 1.0 JSON plus
one byte saying which type to decode it as.

Shared by the memory store (ended tasks' packed logs), SQLite, PostgreSQL (the ``kind``
column) and Redis (the stream entry's ``k`` field, as a one-byte string).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..protocol.trajectory import TrajectoryEvent
from ..protocol.types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

_encode = msgspec.json.Encoder().encode
decode_task = msgspec.json.Decoder(Task).decode
KIND_OF: dict[type[Any], int] = {
    TaskStatusUpdateEvent: ord("s"), TaskArtifactUpdateEvent: ord("a"), TrajectoryEvent: ord("t"),
}
DECODERS: dict[int, msgspec.json.Decoder[Any]] = {
    ord("s"): msgspec.json.Decoder(TaskStatusUpdateEvent),
    ord("a"): msgspec.json.Decoder(TaskArtifactUpdateEvent),
    ord("t"): msgspec.json.Decoder(TrajectoryEvent),
}
TRAJECTORY = ord("t")


def copy_task(task: Task) -> Task:
    """A deep copy of ``task`` (through its JSON)."""
    return decode_task(_encode(task))
