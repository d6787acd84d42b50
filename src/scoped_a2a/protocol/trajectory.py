"""The live-trajectory extension's wire types (no I/O).

An agent's own events (tool calls, model calls) are not A2A event types. They live in the task's
event log beside status and artifact updates, are read by cursor through the trajectory extension
(``TrajectoryRead`` -> ``TrajectoryPage``), and appear in SSE streams only for clients that
activate the extension with the ``A2A-Extensions`` header.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .types import TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent, Wire

TRAJECTORY_EXTENSION_URI = "https://github.com/scoped-a2a/scoped-a2a/ext/trajectory/v1"
"""The extension URI advertised in the card's ``capabilities.extensions``."""

# The JSON-RPC method of a cursor read, and of a context read (every task of a context).
TRAJECTORY_READ_METHOD = "scoped_a2a/trajectory/read"


class TrajectoryEvent(Wire):
    """One event the agent emitted with ``ctx.trajectory(...)``: free-form JSON in ``data``."""

    task_id: str
    context_id: str
    data: dict[str, Any]
    timestamp: str | None = None


LogEvent = TaskStatusUpdateEvent | TaskArtifactUpdateEvent | TrajectoryEvent
"""Everything a task's append-only log can hold."""


class LoggedEvent(Wire):
    """One log entry on the trajectory read: its position, kind and the event itself."""

    position: int
    kind: str  # "statusUpdate" | "artifactUpdate" | "trajectory"
    event: Any


class TrajectoryRead(Wire):
    task_id: str
    after: int = 0
    max_events: int | None = None
    max_bytes: int | None = None
    tenant: str | None = None


class TrajectoryPage(Wire):
    state: TaskState
    events: list[msgspec.Raw]
    next: int
    has_more: bool


def event_kind(event: LogEvent) -> str:
    """The StreamResponse member name of a log event (``trajectory`` for the extension's own)."""
    if isinstance(event, TaskStatusUpdateEvent):
        return "statusUpdate"
    if isinstance(event, TaskArtifactUpdateEvent):
        return "artifactUpdate"
    return "trajectory"
