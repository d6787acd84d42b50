"""Applying log events to a task snapshot: the one place that defines what an event *means*.

Every store uses this, so a snapshot is always exactly the fold of its log (no I/O).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..protocol.on_disconnect import DETACHED_KEY, with_marker
from ..protocol.trajectory import LogEvent
from ..protocol.types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

DOWNSTREAM_KEY = "downstreamTasks"
"""Task metadata: the tasks this task's run started on other agents, ``[{agent, taskId,
contextId}]`` in call order (``ctx.call`` / ``ctx.stream``)."""

SERVER_KEYS = frozenset({DETACHED_KEY, DOWNSTREAM_KEY})
"""Task metadata keys only the server writes (:func:`apply_event` folds them into the task)."""


def server_keys_removed(metadata: dict[str, Any] | None, marker: str | None = None
                        ) -> dict[str, Any] | None:
    """A copy of a caller's or an agent's ``metadata`` without :data:`SERVER_KEYS`, with
    the server's own ``DETACHED_KEY`` ``marker`` when not None (None when nothing is left).

    Why: the tree of calls (``DOWNSTREAM_KEY``) is what a walker follows, with its own
    credentials, to GetTask or CancelTask each task in it: a forged entry would send it to any
    URL and have it cancel a task outside the tree. Whether a run is detached
    (``DETACHED_KEY``) is the server's word to a client deciding whether to cancel it."""
    if metadata and DOWNSTREAM_KEY in metadata:
        metadata = {k: v for k, v in metadata.items() if k != DOWNSTREAM_KEY}
    return with_marker(metadata, marker)


def carries_server_keys(metadata: dict[str, Any] | None) -> bool:
    """True when ``metadata`` holds a key only the server may write (:data:`SERVER_KEYS`)."""
    return metadata is not None and not SERVER_KEYS.isdisjoint(metadata)


def apply_event(task: Task, event: LogEvent) -> None:
    """Fold one event into ``task`` in place.

    A status update replaces the status (its message, if any, joins the history); an artifact
    update adds the artifact, replaces one with the same id, or with ``append`` extends its parts.
    Trajectory events leave the snapshot as it is. A status update whose metadata names
    downstream tasks (``DOWNSTREAM_KEY``, written by ``ctx.call``) adds them to the task's
    metadata, so the tree of calls can be walked from the task. One whose metadata has
    ``DETACHED_KEY`` (a follow-up's first ``working``) sets the task's marker to its value, or
    removes it when the value is null: whether the task's current run is detached.
    """
    if isinstance(event, TaskStatusUpdateEvent):
        task.status = event.status
        meta = event.metadata
        if meta:
            calls = meta.get(DOWNSTREAM_KEY)
            if isinstance(calls, list):
                task.metadata = dict(task.metadata or {})
                task.metadata[DOWNSTREAM_KEY] = [*task.metadata.get(DOWNSTREAM_KEY, ()), *calls]
            if DETACHED_KEY in meta:
                marker = meta[DETACHED_KEY]
                task.metadata = with_marker(task.metadata,
                                            marker if isinstance(marker, str) else None)
        if event.status.message is not None:
            if task.history is None:
                task.history = []
            task.history.append(event.status.message)
    elif isinstance(event, TaskArtifactUpdateEvent):
        # Copy: appends later extend the snapshot's parts, never the logged event's.
        new = msgspec.structs.replace(event.artifact, parts=list(event.artifact.parts))
        if task.artifacts is None:
            task.artifacts = []
        for i, old in enumerate(task.artifacts):
            if old.artifact_id == new.artifact_id:
                if event.append:
                    old.parts.extend(new.parts)
                else:
                    task.artifacts[i] = new
                break
        else:
            task.artifacts.append(new)


def applied(task: Task, event: LogEvent) -> Task:
    """A new snapshot: ``task`` with ``event`` folded in, ``task`` left as it was (it may be in
    a reader's hands). Shares whatever the event does not change: O(what changes), where a
    deep copy would cost the whole snapshot at every event of a long stream."""
    new = msgspec.structs.replace(task)
    if isinstance(event, TaskStatusUpdateEvent):
        if new.history is not None:
            new.history = list(new.history)
    elif isinstance(event, TaskArtifactUpdateEvent) and new.artifacts is not None:
        new.artifacts = list(new.artifacts)
        if event.append:
            for i, old in enumerate(new.artifacts):
                if old.artifact_id == event.artifact.artifact_id:
                    new.artifacts[i] = msgspec.structs.replace(old, parts=list(old.parts))
                    break
    apply_event(new, event)
    return new


def folded(task: Task, events: list[LogEvent]) -> Task:
    """A new snapshot: ``task`` with every event of ``events`` folded in, in order, ``task``
    left as it was (as :func:`applied` does for one event). What the events change is copied
    once for all of them, then folded in place: a batch of k chunks of one artifact costs one
    copy of its parts, not k (applied per event copied them at every event)."""
    new = msgspec.structs.replace(task)
    history = artifacts = False  # copied already (or made by apply_event: private either way)
    own: dict[str, Any] = {}  # artifact id -> this snapshot's own copy (its parts extendable)
    for event in events:
        if isinstance(event, TaskArtifactUpdateEvent):
            key = event.artifact.artifact_id
            mine = own.get(key)
            if event.append and mine is not None:
                mine.parts.extend(event.artifact.parts)  # (what apply_event does, no copy)
                continue
            if not artifacts and new.artifacts is not None:
                new.artifacts = list(new.artifacts)
            artifacts = True
            if event.append and new.artifacts is not None:
                for i, old in enumerate(new.artifacts):
                    if old.artifact_id == key:
                        new.artifacts[i] = msgspec.structs.replace(old, parts=list(old.parts))
                        break
            apply_event(new, event)
            own[key] = next(a for a in new.artifacts or () if a.artifact_id == key)
        elif isinstance(event, TaskStatusUpdateEvent):
            if not history and new.history is not None:
                new.history = list(new.history)
            history = True
            apply_event(new, event)
    return new
