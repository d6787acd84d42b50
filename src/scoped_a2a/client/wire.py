"""The client's side of the two dialects: request params out, results in (no I/O).

Requests are built from the shared 1.0 model (:mod:`scoped_a2a.protocol.types`) and rendered as
1.0 JSON or, for an agent that speaks only 0.3, through :mod:`scoped_a2a.protocol.v03`. Results
are decoded back into the same 1.0 model whichever dialect carried them, so the rest of the
client never sees a 0.3 shape. A result that does not decode raises
:class:`~scoped_a2a.protocol.errors.InvalidAgentResponse`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from ..protocol import v03
from ..protocol.errors import InvalidAgentResponse
from ..protocol.trajectory import TrajectoryEvent
from ..protocol.types import (
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SendMessageResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)
from ..protocol.v03_results import (
    ArtifactUpdate03,
    StatusUpdate03,
    Task03,
    artifact_update_from_v03,
    status_update_from_v03,
    task_from_v03,
)

T = TypeVar("T")
_encode = msgspec.json.Encoder().encode

StreamPayload = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent | TrajectoryEvent
"""What one event of a stream or subscription carries, in the 1.0 model."""


def payload_kind(event: StreamPayload) -> str:
    """The 1.0 ``StreamResponse`` member name of an event (``trajectory`` for the extension)."""
    if isinstance(event, Task):
        return "task"
    if isinstance(event, Message):
        return "message"
    if isinstance(event, TaskStatusUpdateEvent):
        return "statusUpdate"
    if isinstance(event, TaskArtifactUpdateEvent):
        return "artifactUpdate"
    return "trajectory"


@dataclass(slots=True)
class StreamEvent:
    """One event received on a stream: the event and its log position (the SSE ``id``)."""

    event: StreamPayload
    position: int | None

    @property
    def kind(self) -> str:
        return payload_kind(self.event)


def _decode(raw: bytes, type_: type[T], what: str) -> T:
    try:
        return msgspec.json.decode(raw, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise InvalidAgentResponse(f"the agent's {what} is not valid A2A: {exc}") from None


def _convert(fn: Callable[[], T], what: str) -> T:
    try:
        return fn()
    except (KeyError, ValueError) as exc:
        raise InvalidAgentResponse(f"the agent's {what} is not valid A2A 0.3: {exc}") from None


class _Stream10(msgspec.Struct, rename="camel"):
    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None
    trajectory: TrajectoryEvent | None = None


class Codec:
    """The 1.0 dialect: PascalCase methods, ``{"task": ...}`` wrappers, proto enum names."""

    version = "1.0"
    send_method = "SendMessage"
    stream_method = "SendStreamingMessage"
    get_method = "GetTask"
    cancel_method = "CancelTask"
    subscribe_method = "SubscribeToTask"

    def send_params(self, request: SendMessageRequest) -> bytes:
        return _encode(request)

    def get_params(self, task_id: str, history_length: int | None) -> bytes:
        params: dict[str, Any] = {"id": task_id}
        if history_length is not None:
            params["historyLength"] = history_length
        return _encode(params)

    def id_params(self, task_id: str, metadata: dict[str, Any] | None = None) -> bytes:
        params: dict[str, Any] = {"id": task_id}
        if metadata is not None:
            params["metadata"] = metadata
        return _encode(params)

    def send_result(self, raw: bytes) -> Task | Message:
        result = _decode(raw, SendMessageResponse, "SendMessage result")
        if result.task is not None:
            return result.task
        if result.message is not None:
            return result.message
        raise InvalidAgentResponse("the SendMessage result holds neither a task nor a message")

    def task_result(self, raw: bytes) -> Task:
        return _decode(raw, Task, "task")

    def list_result(self, raw: bytes) -> ListTasksResponse:
        return _decode(raw, ListTasksResponse, "ListTasks result")

    def stream_result(self, raw: bytes) -> StreamPayload | None:
        """One stream event; None for a member this client does not know (skipped)."""
        r = _decode(raw, _Stream10, "stream event")
        return r.task or r.message or r.status_update or r.artifact_update or r.trajectory


# --- 0.3 ------------------------------------------------------------------------------------


class _W(msgspec.Struct, rename="camel", kw_only=True):
    pass


class _Probe03(_W):
    """Enough of any 0.3 result to tell what it is (``kind``, else the SDK's fallbacks)."""

    kind: str | None = None
    id: Any = None
    message_id: Any = None
    task_id: Any = None
    final: Any = None


class _Trajectory03(_W):
    event: TrajectoryEvent


class Codec03(Codec):
    """The 0.3 dialect: ``a/b`` methods, bare results with ``kind``, lower-case enums."""

    version = "0.3"
    send_method = "message/send"
    stream_method = "message/stream"
    get_method = "tasks/get"
    cancel_method = "tasks/cancel"
    subscribe_method = "tasks/resubscribe"

    def send_params(self, request: SendMessageRequest) -> bytes:
        cfg = request.configuration
        config: dict[str, Any] = {"blocking": not (cfg is not None and cfg.return_immediately)}
        if cfg is not None:
            if cfg.history_length is not None:
                config["historyLength"] = cfg.history_length
            if cfg.accepted_output_modes is not None:
                config["acceptedOutputModes"] = cfg.accepted_output_modes
        params: dict[str, Any] = {
            "message": v03.message_to_v03(request.message),
            "configuration": config,
        }
        if request.metadata is not None:
            params["metadata"] = request.metadata
        return _encode(params)

    def _payload(self, raw: bytes, what: str) -> StreamPayload | None:
        probe = _decode(raw, _Probe03, what)
        kind = probe.kind
        if kind is None:  # the SDK's fallbacks for results without a discriminator
            if probe.task_id is not None and probe.final is not None:
                kind = "status-update"
            elif probe.message_id is not None:
                kind = "message"
            elif probe.id is not None:
                kind = "task"
        if kind == "task":
            t = _decode(raw, Task03, what)
            return _convert(lambda: task_from_v03(t), what)
        if kind == "message":
            m = _decode(raw, v03.Message03, what)
            return _convert(lambda: v03.message_from_v03(m), what)
        if kind == "status-update":
            s03 = _decode(raw, StatusUpdate03, what)
            return _convert(lambda: status_update_from_v03(s03), what)
        if kind == "artifact-update":
            a03 = _decode(raw, ArtifactUpdate03, what)
            return _convert(lambda: artifact_update_from_v03(a03), what)
        if kind == "trajectory":
            return _decode(raw, _Trajectory03, what).event
        return None

    def send_result(self, raw: bytes) -> Task | Message:
        payload = self._payload(raw, "message/send result")
        if isinstance(payload, (Task, Message)):
            return payload
        raise InvalidAgentResponse("the message/send result is neither a task nor a message")

    def task_result(self, raw: bytes) -> Task:
        payload = self._payload(raw, "task")
        if isinstance(payload, Task):
            return payload
        raise InvalidAgentResponse("the agent answered something other than a task")

    def stream_result(self, raw: bytes) -> StreamPayload | None:
        return self._payload(raw, "stream event")


CODECS: dict[str, Codec] = {"1.0": Codec(), "0.3": Codec03()}
