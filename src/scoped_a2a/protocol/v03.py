"""The A2A 0.3 dialect: parse 0.3 params into the 1.0 model, render the 1.0 model as 0.3 (no I/O).

0.3 differs from 1.0 in shape, not in meaning: every object carries a ``kind`` discriminator,
parts are ``kind``-tagged (``text``/``file``/``data``), enums are lower-case, a send's
``configuration.blocking`` is the inverse of 1.0's ``returnImmediately``, results are bare objects
instead of ``{"task": ...}`` wrappers, and status updates carry ``final``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .types import (
    Artifact,
    AuthenticationInfo,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

STATE_TO_V03 = {
    TaskState.UNSPECIFIED: "unknown",
    TaskState.SUBMITTED: "submitted",
    TaskState.WORKING: "working",
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELED: "canceled",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.REJECTED: "rejected",
    TaskState.AUTH_REQUIRED: "auth-required",
}
STATE_FROM_V03 = {v: k for k, v in STATE_TO_V03.items()}
_ROLE_FROM_V03 = {"user": Role.USER, "agent": Role.AGENT}
_ROLE_TO_V03 = {Role.USER: "user", Role.AGENT: "agent", Role.UNSPECIFIED: "user"}


# --- parsing 0.3 params ----------------------------------------------------------------------


class _W(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    pass


class _FileContent(_W):
    uri: str | None = None
    # base64 text in 0.3; msgspec decodes (and validates) it, so bad base64 is a params error.
    content: bytes | None = msgspec.field(name="bytes", default=None)
    name: str | None = None
    mime_type: str | None = None

    def __post_init__(self) -> None:
        if (self.uri is None) == (self.content is None):
            raise ValueError("a file holds exactly one of 'bytes' or 'uri'")


class TextPart03(_W, tag_field="kind", tag="text"):
    text: str
    metadata: dict[str, Any] | None = None


class FilePart03(_W, tag_field="kind", tag="file"):
    file: _FileContent
    metadata: dict[str, Any] | None = None


class DataPart03(_W, tag_field="kind", tag="data"):
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


Part03 = TextPart03 | FilePart03 | DataPart03


class Message03(_W):
    message_id: str
    role: str
    parts: list[Part03]
    kind: str = "message"
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None

    def __post_init__(self) -> None:
        if self.role not in _ROLE_FROM_V03:
            raise ValueError("role must be 'user' or 'agent'")
        if self.kind != "message":
            raise ValueError("kind must be 'message'")


class PushAuth03(_W):
    schemes: list[str]
    credentials: str | None = None


class PushConfig03(_W):
    url: str
    id: str | None = None
    token: str | None = None
    authentication: PushAuth03 | None = None


class SendConfig03(_W):
    accepted_output_modes: list[str] | None = None
    history_length: int | None = None
    push_notification_config: PushConfig03 | None = None
    blocking: bool | None = None


class MessageSendParams03(_W):
    message: Message03
    configuration: SendConfig03 | None = None
    metadata: dict[str, Any] | None = None


class TaskQueryParams03(_W):
    id: str
    history_length: int | None = None
    metadata: dict[str, Any] | None = None


class TaskIdParams03(_W):
    id: str
    metadata: dict[str, Any] | None = None


class TaskPushConfig03(_W):
    task_id: str
    push_notification_config: PushConfig03


class GetPushConfigParams03(_W):
    id: str  # the task id
    push_notification_config_id: str | None = None
    metadata: dict[str, Any] | None = None


class DeletePushConfigParams03(_W):
    id: str  # the task id
    push_notification_config_id: str
    metadata: dict[str, Any] | None = None


def part_from_v03(p: Part03) -> Part:
    if isinstance(p, TextPart03):
        return Part(text=p.text, metadata=p.metadata)
    if isinstance(p, DataPart03):
        return Part(data=p.data, metadata=p.metadata)
    f = p.file  # exactly one of content/uri (checked on decoding)
    if f.content is not None:
        return Part(raw=f.content, filename=f.name, media_type=f.mime_type, metadata=p.metadata)
    return Part(url=f.uri, filename=f.name, media_type=f.mime_type, metadata=p.metadata)


def message_from_v03(m: Message03) -> Message:
    return Message(
        message_id=m.message_id,
        role=_ROLE_FROM_V03[m.role],
        parts=[part_from_v03(p) for p in m.parts],
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
        reference_task_ids=m.reference_task_ids,
    )


def push_config_from_v03(c: PushConfig03, task_id: str | None = None) -> TaskPushNotificationConfig:
    auth = None
    if c.authentication is not None:
        scheme = c.authentication.schemes[0] if c.authentication.schemes else "Bearer"
        auth = AuthenticationInfo(scheme=scheme, credentials=c.authentication.credentials)
    return TaskPushNotificationConfig(
        url=c.url, id=c.id, task_id=task_id, token=c.token, authentication=auth
    )


def send_request_from_v03(p: MessageSendParams03) -> SendMessageRequest:
    cfg = None
    if p.configuration is not None:
        c = p.configuration
        cfg = SendMessageConfiguration(
            accepted_output_modes=c.accepted_output_modes,
            history_length=c.history_length,
            # 0.3's default is blocking; only an explicit false asks not to wait.
            return_immediately=c.blocking is False,
            task_push_notification_config=(
                push_config_from_v03(c.push_notification_config)
                if c.push_notification_config is not None
                else None
            ),
        )
    return SendMessageRequest(message=message_from_v03(p.message), configuration=cfg,
                              metadata=p.metadata)


# --- rendering the model as 0.3 --------------------------------------------------------------


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def part_to_v03(p: Part) -> dict[str, Any]:
    if p.text is not None:
        return _drop_none({"kind": "text", "text": p.text, "metadata": p.metadata})
    if p.data is not None:
        data = p.data if isinstance(p.data, dict) else {"value": p.data}
        return _drop_none({"kind": "data", "data": data, "metadata": p.metadata})
    file: dict[str, Any] = _drop_none({"name": p.filename, "mimeType": p.media_type})
    if p.raw is not None:
        import base64

        file["bytes"] = base64.b64encode(p.raw).decode("ascii")
    else:
        file["uri"] = p.url
    return _drop_none({"kind": "file", "file": file, "metadata": p.metadata})


def message_to_v03(m: Message) -> dict[str, Any]:
    return _drop_none(
        {
            "kind": "message",
            "messageId": m.message_id,
            "role": _ROLE_TO_V03[m.role],
            "parts": [part_to_v03(p) for p in m.parts],
            "contextId": m.context_id,
            "taskId": m.task_id,
            "metadata": m.metadata,
            "extensions": m.extensions,
            "referenceTaskIds": m.reference_task_ids,
        }
    )


def status_to_v03(s: TaskStatus) -> dict[str, Any]:
    return _drop_none(
        {
            "state": STATE_TO_V03[s.state],
            "message": message_to_v03(s.message) if s.message is not None else None,
            "timestamp": s.timestamp,
        }
    )


def artifact_to_v03(a: Artifact) -> dict[str, Any]:
    return _drop_none(
        {
            "artifactId": a.artifact_id,
            "name": a.name,
            "description": a.description,
            "parts": [part_to_v03(p) for p in a.parts],
            "metadata": a.metadata,
            "extensions": a.extensions,
        }
    )


def task_to_v03(t: Task) -> dict[str, Any]:
    return _drop_none(
        {
            "kind": "task",
            "id": t.id,
            "contextId": t.context_id,
            "status": status_to_v03(t.status),
            "artifacts": [artifact_to_v03(a) for a in t.artifacts] if t.artifacts else None,
            "history": [message_to_v03(m) for m in t.history] if t.history else None,
            "metadata": t.metadata,
        }
    )


def status_update_to_v03(e: TaskStatusUpdateEvent) -> dict[str, Any]:
    return _drop_none(
        {
            "kind": "status-update",
            "taskId": e.task_id,
            "contextId": e.context_id,
            "status": status_to_v03(e.status),
            # 0.3 marks the last event of a stream; terminal and interrupted states end it.
            "final": e.status.state.terminal or e.status.state.interrupted,
            "metadata": e.metadata,
        }
    )


def artifact_update_to_v03(e: TaskArtifactUpdateEvent) -> dict[str, Any]:
    return _drop_none(
        {
            "kind": "artifact-update",
            "taskId": e.task_id,
            "contextId": e.context_id,
            "artifact": artifact_to_v03(e.artifact),
            "append": e.append,
            "lastChunk": e.last_chunk,
            "metadata": e.metadata,
        }
    )


def push_config_to_v03(c: TaskPushNotificationConfig) -> dict[str, Any]:
    auth = None
    if c.authentication is not None:
        auth = _drop_none(
            {"schemes": [c.authentication.scheme], "credentials": c.authentication.credentials}
        )
    return {
        "taskId": c.task_id,
        "pushNotificationConfig": _drop_none(
            {"url": c.url, "id": c.id, "token": c.token, "authentication": auth}
        ),
    }
