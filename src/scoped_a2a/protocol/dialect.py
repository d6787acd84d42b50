"""The two dialects on one URL: method names and result shapes of 1.0 and 0.3 (no I/O).

Handlers work on the 1.0 model; a :class:`Dialect` decodes a method's params into it and renders
results back in the caller's shape. Which dialect answers is chosen by the method name (the 0.3
names are ``a/b`` paths, the 1.0 names are PascalCase); the ``A2A-Version`` header, when present,
must name a version this server speaks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from . import v03
from .errors import VersionNotSupported
from .jsonrpc import decode_params
from .trajectory import LogEvent, TrajectoryEvent
from .types import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushConfigRequest,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
)

_encode = msgspec.json.Encoder().encode

SUPPORTED_VERSIONS = ("1.0", "0.3")


class Frame(NamedTuple):
    """A stream result in three pieces: ``head + body + tail`` is its JSON.

    ``body`` is the big part (a task snapshot, an event) and is encoded once and shared by every
    stream that sends it; ``head`` and ``tail`` are a few bytes of wrapping. A writer sends the
    pieces without joining them into one per-stream copy (``server/sse.py``).
    """

    head: bytes
    body: bytes
    tail: bytes

    def joined(self) -> bytes:
        return self.head + self.body + self.tail


_TASK_HEAD = b'{"task":'
_STATUS_HEAD = b'{"statusUpdate":'
_ARTIFACT_HEAD = b'{"artifactUpdate":'
_TRAJECTORY_HEAD = b'{"trajectory":'
_V03_TRAJECTORY_HEAD = b'{"kind":"trajectory","event":'

# 1.0 method name -> 0.3 method name (where 0.3 has one).
V03_NAMES = {
    "SendMessage": "message/send",
    "SendStreamingMessage": "message/stream",
    "GetTask": "tasks/get",
    "CancelTask": "tasks/cancel",
    "SubscribeToTask": "tasks/resubscribe",
    "CreateTaskPushNotificationConfig": "tasks/pushNotificationConfig/set",
    "GetTaskPushNotificationConfig": "tasks/pushNotificationConfig/get",
    "ListTaskPushNotificationConfigs": "tasks/pushNotificationConfig/list",
    "DeleteTaskPushNotificationConfig": "tasks/pushNotificationConfig/delete",
    "GetExtendedAgentCard": "agent/getAuthenticatedExtendedCard",
}
FROM_V03 = {v: k for k, v in V03_NAMES.items()}

# The params type of each method, under the name the caller used (1.0 and 0.3).
PARAM_TYPES: dict[str, type[Any]] = {
    "SendMessage": SendMessageRequest,
    "SendStreamingMessage": SendMessageRequest,
    "GetTask": GetTaskRequest,
    "ListTasks": ListTasksRequest,
    "CancelTask": CancelTaskRequest,
    "SubscribeToTask": SubscribeToTaskRequest,
    "CreateTaskPushNotificationConfig": TaskPushNotificationConfig,
    "GetTaskPushNotificationConfig": TaskPushConfigRequest,
    "ListTaskPushNotificationConfigs": TaskPushConfigRequest,
    "DeleteTaskPushNotificationConfig": TaskPushConfigRequest,
    "GetExtendedAgentCard": GetExtendedAgentCardRequest,
    "message/send": v03.MessageSendParams03,
    "message/stream": v03.MessageSendParams03,
    "tasks/get": v03.TaskQueryParams03,
    "tasks/cancel": v03.TaskIdParams03,
    "tasks/resubscribe": v03.TaskIdParams03,
    "tasks/pushNotificationConfig/set": v03.TaskPushConfig03,
    "tasks/pushNotificationConfig/get": v03.GetPushConfigParams03,
    "tasks/pushNotificationConfig/list": v03.TaskIdParams03,
    "tasks/pushNotificationConfig/delete": v03.DeletePushConfigParams03,
}
OPTIONAL_PARAMS = frozenset(
    {"ListTasks", "GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"})
"""Methods whose params may be left out."""


def check_params(method: str, raw: msgspec.Raw | None) -> None:
    """Raise InvalidParams (-32602) when ``raw`` does not decode as ``method``'s params.

    Only decodes; nothing is done. Used where a request cannot be executed but its params
    should still be judged (a request without an ``id``).
    """
    type_ = PARAM_TYPES.get(method)
    if type_ is None or (raw is None and method in OPTIONAL_PARAMS):
        return
    decode_params(raw, type_)


def check_version(header: str | None) -> None:
    """Raise VersionNotSupported (-32009) for an ``A2A-Version`` this server does not speak."""
    if header is None or not header.strip():
        return
    value = header.strip()
    major_minor = ".".join(value.split(".")[:2])
    if major_minor not in SUPPORTED_VERSIONS:
        raise VersionNotSupported(
            f"A2A-Version {value!r} is not supported; this server speaks "
            + " and ".join(SUPPORTED_VERSIONS)
        )


class Dialect:
    """The 1.0 dialect; :class:`V03` overrides what 0.3 shapes differently."""

    v1 = True
    version = "1.0"

    def send_params(self, raw: msgspec.Raw | None) -> SendMessageRequest:
        return decode_params(raw, SendMessageRequest)

    def get_params(self, raw: msgspec.Raw | None) -> GetTaskRequest:
        return decode_params(raw, GetTaskRequest)

    def cancel_params(self, raw: msgspec.Raw | None) -> CancelTaskRequest:
        return decode_params(raw, CancelTaskRequest)

    def subscribe_params(self, raw: msgspec.Raw | None) -> SubscribeToTaskRequest:
        return decode_params(raw, SubscribeToTaskRequest)

    def task(self, task: Task) -> bytes:
        return _encode(task)

    def send_result(self, task: Task) -> bytes:
        return b'{"task":' + _encode(task) + b"}"

    def message_result(self, message: Message) -> bytes:
        return b'{"message":' + _encode(message) + b"}"

    def stream_task(self, task: Task) -> bytes:
        return self.stream_task_frame(task).joined()

    def stream_event(self, event: LogEvent, encoded: bytes) -> bytes:
        return self.stream_event_frame(event, encoded).joined()

    def stream_task_frame(self, task: Task) -> Frame:
        """The first event of a stream: the task snapshot (encoded here: cache the result)."""
        return Frame(_TASK_HEAD, _encode(task), b"}")

    event_reencodes = False
    """Whether :meth:`stream_event_frame` encodes anew (then its result is worth caching)."""

    def stream_event_frame(self, event: LogEvent, encoded: bytes) -> Frame:
        """One logged event as a stream result; ``encoded`` (its 1.0 JSON) is the shared body."""
        if isinstance(event, TaskStatusUpdateEvent):
            return Frame(_STATUS_HEAD, encoded, b"}")
        if isinstance(event, TaskArtifactUpdateEvent):
            return Frame(_ARTIFACT_HEAD, encoded, b"}")
        return Frame(_TRAJECTORY_HEAD, encoded, b"}")

    def push_config(self, config: TaskPushNotificationConfig) -> bytes:
        return _encode(config)

    def push_configs(self, configs: list[TaskPushNotificationConfig]) -> bytes:
        return _encode({"configs": configs})


class V03(Dialect):
    v1 = False
    version = "0.3"

    def send_params(self, raw: msgspec.Raw | None) -> SendMessageRequest:
        return v03.send_request_from_v03(decode_params(raw, v03.MessageSendParams03))

    def get_params(self, raw: msgspec.Raw | None) -> GetTaskRequest:
        p = decode_params(raw, v03.TaskQueryParams03)
        return GetTaskRequest(id=p.id, history_length=p.history_length)

    def cancel_params(self, raw: msgspec.Raw | None) -> CancelTaskRequest:
        p = decode_params(raw, v03.TaskIdParams03)
        return CancelTaskRequest(id=p.id, metadata=p.metadata)

    def subscribe_params(self, raw: msgspec.Raw | None) -> SubscribeToTaskRequest:
        p = decode_params(raw, v03.TaskIdParams03)
        return SubscribeToTaskRequest(id=p.id)

    def task(self, task: Task) -> bytes:
        return _encode(v03.task_to_v03(task))

    def send_result(self, task: Task) -> bytes:
        return self.task(task)

    def message_result(self, message: Message) -> bytes:
        return _encode(v03.message_to_v03(message))

    def stream_task_frame(self, task: Task) -> Frame:
        return Frame(b"", self.task(task), b"")

    event_reencodes = True

    def stream_event_frame(self, event: LogEvent, encoded: bytes) -> Frame:
        out: dict[str, Any]
        if isinstance(event, TaskStatusUpdateEvent):
            out = v03.status_update_to_v03(event)
        elif isinstance(event, TaskArtifactUpdateEvent):
            out = v03.artifact_update_to_v03(event)
        else:
            assert isinstance(event, TrajectoryEvent)
            return Frame(_V03_TRAJECTORY_HEAD, encoded, b"}")
        return Frame(b"", _encode(out), b"")

    def push_config(self, config: TaskPushNotificationConfig) -> bytes:
        return _encode(v03.push_config_to_v03(config))

    def push_configs(self, configs: list[TaskPushNotificationConfig]) -> bytes:
        return _encode([v03.push_config_to_v03(c) for c in configs])


V10_DIALECT = Dialect()
V03_DIALECT = V03()
