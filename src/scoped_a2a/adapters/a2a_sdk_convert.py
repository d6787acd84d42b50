"""Between a2a-sdk 1.x's protobuf types and this project's wire structs (no I/O).

Both are the A2A 1.0 data model, and our structs are its ProtoJSON shape, so the conversion goes
through JSON: protobuf's own ``json_format`` writes and parses one side, msgspec the other.
That keeps every field (file parts, data parts, metadata, extensions) without a hand-written
mapping to fall behind the proto. Events written with a2a-sdk's 0.3 compatibility types
(pydantic, ``a2a.compat.v0_3.types``) are turned into 1.x protobuf first, by a2a-sdk's own
conversions.

Errors: a message that does not fit (a part with no content, say) raises ValueError naming it.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from ..protocol.types import (
    Message,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)

W = TypeVar("W", bound=msgspec.Struct)
P = TypeVar("P", bound=ProtoMessage)

_encode = msgspec.json.Encoder().encode


def to_ours(proto: ProtoMessage, kind: type[W]) -> W:
    """The struct ``kind`` for a protobuf message; ValueError when it does not fit."""
    data = json_format.MessageToJson(proto, indent=None)
    try:
        return msgspec.json.decode(data, type=kind)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ValueError(f"{type(proto).__name__} does not fit A2A 1.0: {exc}") from None


def to_proto(struct: msgspec.Struct, kind: type[P]) -> P:
    """The protobuf message ``kind`` for one of our structs (unknown fields are dropped)."""
    return json_format.Parse(_encode(struct), kind(), ignore_unknown_fields=True)


def message_to_proto(message: Message) -> pb.Message:
    return to_proto(message, pb.Message)


def task_to_proto(task: Task) -> pb.Task:
    return to_proto(task, pb.Task)


def compat_to_core(event: object) -> object:
    """An event of a2a-sdk's 0.3 compatibility types as 1.x protobuf; others unchanged."""
    if not type(event).__module__.startswith("a2a.compat.v0_3"):
        return event
    from a2a.compat.v0_3 import conversions, types

    converters: dict[type, Any] = {
        types.Message: conversions.to_core_message,
        types.Task: conversions.to_core_task,
        types.TaskStatusUpdateEvent: conversions.to_core_task_status_update_event,
        types.TaskArtifactUpdateEvent: conversions.to_core_task_artifact_update_event,
    }
    convert = converters.get(type(event))
    return convert(event) if convert is not None else event


EVENT_KINDS: dict[type[ProtoMessage], type[msgspec.Struct]] = {
    pb.Message: Message,
    pb.Task: Task,
    pb.TaskStatusUpdateEvent: TaskStatusUpdateEvent,
    pb.TaskArtifactUpdateEvent: TaskArtifactUpdateEvent,
}
"""The protobuf events an executor may enqueue, and the struct each becomes."""
