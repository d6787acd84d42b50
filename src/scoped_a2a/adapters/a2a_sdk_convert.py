"""The 1.x generation of a2a-sdk (protobuf types): its events, request context and card.

The runner (:mod:`.a2a_sdk`) and the event rules (:mod:`.a2a_sdk_events`) are shared by both
generations; this module and :mod:`.a2a_sdk03_convert` are the only parts that know a
generation's types. Each provides ``GENERATION``, ``TASK_BEFORE_STATUS``, :func:`to_event`,
:func:`request_context` and :func:`card_dict` (what :func:`.a2a_sdk.conversion` returns).

Both are the A2A 1.0 data model, and our structs are its ProtoJSON shape, so the conversion goes
through JSON: protobuf's own ``json_format`` writes and parses one side, msgspec the other.
That keeps every field (file parts, data parts, metadata, extensions) without a hand-written
mapping to fall behind the proto. Events written with a2a-sdk's 0.3 compatibility types
(pydantic, ``a2a.compat.v0_3.types``) are turned into 1.x protobuf first, by a2a-sdk's own
conversions.

Errors: a message that does not fit (a part with no content, say) raises ValueError naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from ..runtime.context import RunContext

GENERATION = "1.x"
TASK_BEFORE_STATUS = True
"""1.x requires a ``Task`` event before the first status update of a new task."""

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


OurEvent = Message | Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


def to_event(event: object) -> OurEvent | None:
    """Our struct for an event an executor enqueued (protobuf, or 0.3 compatibility types);
    None when it is not an A2A event; ValueError when it does not fit A2A 1.0."""
    event = compat_to_core(event)
    kind = EVENT_KINDS.get(type(event))  # type: ignore[arg-type]
    if kind is None or not isinstance(event, ProtoMessage):
        return None
    ours: OurEvent = to_ours(event, kind)  # type: ignore[assignment]
    return ours


def request_context(ctx: RunContext, current: Task | None, related: Sequence[Task],
                    user: Any) -> Any:
    """a2a-sdk 1.x's ``RequestContext`` for the run's current message (``user``: a2a-sdk's
    ``User`` for the caller)."""
    from a2a.server.agent_execution import RequestContext
    from a2a.server.context import ServerCallContext

    request = pb.SendMessageRequest(message=message_to_proto(ctx.message))
    if ctx.request_metadata:
        request.metadata.update(ctx.request_metadata)
    call = ServerCallContext(
        user=user,
        tenant=ctx.tenant,
        requested_extensions=set(ctx.message.extensions or ()),
        state={"principal": ctx.principal, "claims": dict(ctx.principal.claims)},
    )
    return RequestContext(
        call_context=call, request=request, task_id=ctx.task_id, context_id=ctx.context_id,
        task=task_to_proto(current) if current is not None else None,
        related_tasks=[task_to_proto(t) for t in related])


def card_dict(card: Any) -> dict[str, Any]:
    """An executor's card (a protobuf ``AgentCard`` or its JSON dict) as a JSON dict."""
    if isinstance(card, dict):
        return card
    return json_format.MessageToDict(card)
