"""A2A 1.0 wire types, as msgspec structs (no I/O).

These structs are both the internal model and the 1.0 JSON shape: field names are camelCase on the
wire (``rename="camel"``), absent optional fields are omitted (``omit_defaults``), and unknown
fields are ignored on the way in, as the proto's JSON mapping allows. The 0.3 shapes are produced
and parsed by :mod:`scoped_a2a.protocol.v03`, which converts to and from these.

Why msgspec: it decodes and validates JSON straight into typed structs in one pass, several times
faster than pydantic or protobuf's ``json_format``, and it is the hot path of every request.
"""

from __future__ import annotations

import enum
import time
from typing import Any

import msgspec


class TaskState(enum.StrEnum):
    """The 1.0 task states. Terminal states never change; interrupted ones wait for input."""

    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    REJECTED = "TASK_STATE_REJECTED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def interrupted(self) -> bool:
        return self in _INTERRUPTED


_TERMINAL = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
_INTERRUPTED = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


class Role(enum.StrEnum):
    UNSPECIFIED = "ROLE_UNSPECIFIED"
    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"


class Wire(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True, gc=False):
    """Base of every wire struct: camelCase names, omitted defaults, keyword construction.

    ``gc=False``: wire objects form trees, never cycles, so the cyclic garbage collector need
    not track them; a store holding thousands of ended tasks otherwise makes every collection
    walk all their messages and parts (the benchmarks saw throughput fall run after run).
    """


class Part(Wire):
    """One piece of content: exactly one of ``text``, ``raw`` (base64), ``url``, ``data``."""

    text: str | None = None
    raw: bytes | None = None
    url: str | None = None
    data: Any = None
    metadata: dict[str, Any] | None = None
    filename: str | None = None
    media_type: str | None = None

    def __post_init__(self) -> None:
        # Runs for every part decoded (each stored read decodes some): plain adds, no generator.
        present = ((self.text is not None) + (self.raw is not None) + (self.url is not None)
                   + (self.data is not None))
        if present != 1:
            raise ValueError("a part holds exactly one of text, raw, url, data")


class Message(Wire):
    message_id: str
    role: Role
    parts: list[Part]
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None

    @property
    def text(self) -> str:
        """The message's text parts joined by newlines."""
        return "\n".join(p.text for p in self.parts if p.text is not None)


class TaskStatus(Wire):
    state: TaskState
    message: Message | None = None
    timestamp: str | None = None


class Artifact(Wire):
    artifact_id: str
    parts: list[Part]
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class Task(Wire):
    id: str
    context_id: str
    status: TaskStatus
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None


class TaskStatusUpdateEvent(Wire):
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: dict[str, Any] | None = None


class TaskArtifactUpdateEvent(Wire):
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] | None = None


class StreamResponse(Wire):
    """One SSE event of a 1.0 stream: exactly one field is set."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None


class SendMessageResponse(Wire):
    task: Task | None = None
    message: Message | None = None


# --- request params -------------------------------------------------------------------------


class AuthenticationInfo(Wire):
    scheme: str
    credentials: str | None = None


class TaskPushNotificationConfig(Wire):
    url: str
    id: str | None = None
    task_id: str | None = None
    token: str | None = None
    authentication: AuthenticationInfo | None = None
    tenant: str | None = None


class SendMessageConfiguration(Wire):
    accepted_output_modes: list[str] | None = None
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = None
    return_immediately: bool = False


class SendMessageRequest(Wire):
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class GetTaskRequest(Wire):
    id: str
    history_length: int | None = None
    tenant: str | None = None


class ListTasksRequest(Wire):
    context_id: str | None = None
    status: TaskState | None = None
    page_size: int | None = None
    page_token: str | None = None
    history_length: int | None = None
    status_timestamp_after: str | None = None
    include_artifacts: bool = False
    tenant: str | None = None


class ListTasksResponse(Wire, omit_defaults=False):
    """Every field is written, defaults included: the proto marks all four REQUIRED (an empty
    ``nextPageToken`` says this is the last page)."""

    tasks: list[Task]
    next_page_token: str = ""
    page_size: int = 0
    total_size: int = 0


class CancelTaskRequest(Wire):
    id: str
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class SubscribeToTaskRequest(Wire):
    id: str
    tenant: str | None = None


class TaskPushConfigRequest(Wire):
    """Get/Delete/List of push-notification configs (``id`` absent for List)."""

    task_id: str
    id: str | None = None
    page_size: int | None = None
    page_token: str | None = None
    tenant: str | None = None


class GetExtendedAgentCardRequest(Wire):
    tenant: str | None = None


def utc_timestamp() -> str:
    """Now, as the ISO 8601 UTC timestamp with milliseconds and ``Z`` that A2A uses.

    Every event carries one, so the date-and-time part is formatted once per second and reused
    (``strftime`` was a visible share of a send's CPU); only the milliseconds change within it.
    """
    millis = int(time.time() * 1000)
    if millis == _stamp_cache[2]:
        return _stamp_cache[3]  # type: ignore[no-any-return]
    second, ms = divmod(millis, 1000)
    if second != _stamp_cache[0]:
        _stamp_cache[0] = second
        _stamp_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
    stamp = f"{_stamp_cache[1]}{ms:03d}Z"
    _stamp_cache[2], _stamp_cache[3] = millis, stamp
    return stamp


# [the second formatted, its "YYYY-MM-DDTHH:MM:SS." text, the millisecond last given, its stamp]
# (a send stamps three events, mostly within one millisecond)
_stamp_cache: list[Any] = [-1, "", -1, ""]


def normalize_timestamp(text: str, *, field: str) -> str:
    """An RFC 3339 timestamp (ProtoJSON's form) rewritten as :func:`utc_timestamp` writes them.

    A timestamp without an offset is taken as UTC. Raises InvalidParams naming ``field`` for
    anything else.
    """
    import datetime

    from .errors import InvalidParams

    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidParams(
            f"{field} must be an RFC 3339 timestamp such as 2026-01-31T12:00:00Z, not {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    when = when.astimezone(datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
