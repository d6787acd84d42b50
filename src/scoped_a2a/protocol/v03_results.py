"""A2A 0.3 results as they arrive (a task, status and artifact updates) and their 1.0 model
(no I/O).

The shapes both a 0.3 client reads (``client/wire.py``: another agent's answers) and the
a2a-sdk 0.3 adapter reads (``adapters/a2a_sdk03_convert.py``: what an executor enqueued),
decoded with msgspec, then turned into :mod:`.types`. The converters raise ValueError for what
does not fit (an unknown state, a file part with neither bytes nor a URI); callers word it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .types import Artifact, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent
from .v03 import STATE_FROM_V03, Message03, Part03, message_from_v03, part_from_v03


class _W(msgspec.Struct, rename="camel", kw_only=True):
    pass


class Status03(_W):
    state: str
    message: Message03 | None = None
    timestamp: str | None = None


class Artifact03(_W):
    artifact_id: str
    parts: list[Part03]
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class Task03(_W):
    id: str
    context_id: str
    status: Status03
    artifacts: list[Artifact03] | None = None
    history: list[Message03] | None = None
    metadata: dict[str, Any] | None = None


class StatusUpdate03(_W):
    task_id: str
    context_id: str
    status: Status03
    final: bool = False  # not kept: the state says whether the task ended or waits
    metadata: dict[str, Any] | None = None


class ArtifactUpdate03(_W):
    task_id: str
    context_id: str
    artifact: Artifact03
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: dict[str, Any] | None = None


def status_from_v03(s: Status03) -> TaskStatus:
    state = STATE_FROM_V03.get(s.state)
    if state is None:
        raise ValueError(f"a status with the unknown state {s.state!r}")
    message = message_from_v03(s.message) if s.message is not None else None
    return TaskStatus(state=state, message=message, timestamp=s.timestamp)


def artifact_from_v03(a: Artifact03) -> Artifact:
    return Artifact(artifact_id=a.artifact_id, parts=[part_from_v03(p) for p in a.parts],
                    name=a.name, description=a.description, metadata=a.metadata,
                    extensions=a.extensions)


def task_from_v03(t: Task03) -> Task:
    return Task(id=t.id, context_id=t.context_id, status=status_from_v03(t.status),
                artifacts=[artifact_from_v03(a) for a in t.artifacts] if t.artifacts else None,
                history=[message_from_v03(m) for m in t.history] if t.history else None,
                metadata=t.metadata)


def status_update_from_v03(u: StatusUpdate03) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=u.task_id, context_id=u.context_id,
                                 status=status_from_v03(u.status), metadata=u.metadata)


def artifact_update_from_v03(a: ArtifactUpdate03) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=a.task_id, context_id=a.context_id, artifact=artifact_from_v03(a.artifact),
        append=bool(a.append), last_chunk=bool(a.last_chunk), metadata=a.metadata)
