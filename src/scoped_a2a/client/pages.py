"""A page of a task's live trajectory, as followers hand it to sinks (no I/O).

Whichever way it was read (the trajectory extension's cursor read, or an SSE subscription), a page
holds events in one shape: ``{position, kind, event}`` with ``event`` in A2A 1.0 JSON (camelCase)
and ``kind`` one of ``task``, ``message``, ``statusUpdate``, ``artifactUpdate``, ``trajectory``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

import msgspec

from ..protocol.trajectory import LoggedEvent
from ..protocol.types import TaskState, Wire

EVENT_FORMAT = "scoped-a2a/logged-event/v1"
"""Names the event shape above (written to a directory sink's ``meta.json``)."""


@dataclass(frozen=True, slots=True)
class LivePage:
    """Events after position ``after``, up to and including position ``next``."""

    task_id: str
    after: int
    next: int
    events: list[LoggedEvent]
    state: TaskState | None  # the task's state when the page was read (None: not known)
    has_more: bool = False

    def jsonl(self) -> bytes:
        """The page as JSON lines, one event per line (what a directory sink writes)."""
        return b"".join(_encode(e) + b"\n" for e in self.events)


class PageSink(Protocol):
    """Where a follower delivers pages: any async callable taking a :class:`LivePage`."""

    def __call__(self, page: LivePage, /) -> Awaitable[None]: ...


class WirePage(Wire):
    """The trajectory extension's read answer, decoded for the client."""

    state: TaskState
    events: list[LoggedEvent]
    next: int
    has_more: bool = False


_encode = msgspec.json.Encoder().encode
