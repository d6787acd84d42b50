"""The 0.3 generation of a2a-sdk (pydantic types): its events, request context and card.

Strands, BeeAI and CrewAI still pin a2a-sdk < 0.4, whose ``AgentExecutor``, ``EventQueue`` and
``RequestContext`` live at the same module paths as 1.x's but whose types are pydantic models
shaped as A2A 0.3 JSON (``kind``-tagged parts, lower-case states). The conversion goes through
that JSON: pydantic writes and parses one side, and this project's own 0.3 dialect
(:mod:`scoped_a2a.protocol.v03`, the one the server speaks to 0.3 callers) the other, so no
field mapping is written twice. Same protocol as :mod:`.a2a_sdk_convert` (``GENERATION``,
``TASK_BEFORE_STATUS``,
:func:`to_event`, :func:`request_context`, :func:`card_dict`).

Typing: mypy runs where a2a-sdk 1.x is installed, whose ``a2a.types`` has none of these names,
so the 0.3 modules are imported through :func:`importlib.import_module` and typed ``Any`` at
that boundary; everything past it is our structs.

Errors: an event that does not fit (a file part with neither bytes nor a URI, an unknown state)
raises ValueError naming it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import msgspec

from ..protocol.types import (
    Artifact,
    Message,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from ..protocol.v03 import (
    STATE_FROM_V03,
    Message03,
    Part03,
    message_from_v03,
    message_to_v03,
    part_from_v03,
    task_to_v03,
)
from ..runtime.context import RunContext

GENERATION = "0.3"
TASK_BEFORE_STATUS = False
"""0.3's server makes the task from its first status update (``TaskManager.ensure_task``), and
executors rely on it (BeeAI's sets ``context.current_task`` and sends ``submitted``)."""

OurEvent = Message | Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


class _W(msgspec.Struct, rename="camel", kw_only=True):
    pass


class _Status03(_W):
    state: str
    message: Message03 | None = None
    timestamp: str | None = None


class _Artifact03(_W):
    artifact_id: str
    parts: list[Part03]
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class _Task03(_W):
    id: str
    context_id: str
    status: _Status03
    artifacts: list[_Artifact03] | None = None
    history: list[Message03] | None = None
    metadata: dict[str, Any] | None = None


class _StatusUpdate03(_W):
    task_id: str
    context_id: str
    status: _Status03
    metadata: dict[str, Any] | None = None


class _ArtifactUpdate03(_W):
    task_id: str
    context_id: str
    artifact: _Artifact03
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: dict[str, Any] | None = None


def _types() -> Any:
    """``a2a.types`` of 0.3 (``Any``: see the module docstring)."""
    return importlib.import_module("a2a.types")


def _status(s: _Status03) -> TaskStatus:
    state = STATE_FROM_V03.get(s.state)
    if state is None:
        raise ValueError(f"a status with the unknown state {s.state!r}")
    message = message_from_v03(s.message) if s.message is not None else None
    return TaskStatus(state=state, message=message, timestamp=s.timestamp)


def _artifact(a: _Artifact03) -> Artifact:
    return Artifact(artifact_id=a.artifact_id, parts=[part_from_v03(p) for p in a.parts],
                    name=a.name, description=a.description, metadata=a.metadata,
                    extensions=a.extensions)


def _decode(data: dict[str, Any], kind: type[Any]) -> Any:
    try:
        return msgspec.convert(data, kind)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ValueError(f"a {data.get('kind', 'event')} that does not fit A2A: {exc}") from None


def to_event(event: object) -> OurEvent | None:
    """Our struct for an event an executor enqueued (a 0.3 pydantic ``Message``, ``Task``,
    ``TaskStatusUpdateEvent`` or ``TaskArtifactUpdateEvent``); None for anything else."""
    dump = getattr(event, "model_dump", None)
    if dump is None or not type(event).__module__.startswith("a2a."):
        return None
    data: dict[str, Any] = dump(mode="json", by_alias=True, exclude_none=True)
    kind = data.get("kind")
    if kind == "message":
        return message_from_v03(_decode(data, Message03))
    if kind == "task":
        t: _Task03 = _decode(data, _Task03)
        return Task(id=t.id, context_id=t.context_id, status=_status(t.status),
                    artifacts=[_artifact(a) for a in t.artifacts] if t.artifacts else None,
                    history=[message_from_v03(m) for m in t.history] if t.history else None,
                    metadata=t.metadata)
    if kind == "status-update":
        u: _StatusUpdate03 = _decode(data, _StatusUpdate03)
        # 0.3's ``final`` is not kept: the state says whether the task ended or waits.
        return TaskStatusUpdateEvent(task_id=u.task_id, context_id=u.context_id,
                                     status=_status(u.status), metadata=u.metadata)
    if kind == "artifact-update":
        a: _ArtifactUpdate03 = _decode(data, _ArtifactUpdate03)
        return TaskArtifactUpdateEvent(task_id=a.task_id, context_id=a.context_id,
                                       artifact=_artifact(a.artifact), append=bool(a.append),
                                       last_chunk=bool(a.last_chunk), metadata=a.metadata)
    return None


def task_to_pydantic(task: Task) -> Any:
    """a2a-sdk 0.3's ``Task`` for one of ours."""
    if task.status.state is TaskState.UNSPECIFIED:
        task = msgspec.structs.replace(task, status=msgspec.structs.replace(
            task.status, state=TaskState.SUBMITTED))
    return _types().Task.model_validate(task_to_v03(task))


def request_context(ctx: RunContext, current: Task | None, related: Sequence[Task],
                    user: Any) -> Any:
    """a2a-sdk 0.3's ``RequestContext`` for the run's current message (``user``: a2a-sdk's
    ``User`` for the caller). 0.3 has no tenant: the tenant is in ``state["tenant"]``."""
    execution = importlib.import_module("a2a.server.agent_execution")
    server_context = importlib.import_module("a2a.server.context")
    params = {"message": message_to_v03(ctx.message)}
    if ctx.request_metadata:
        params["metadata"] = dict(ctx.request_metadata)
    call = server_context.ServerCallContext(
        user=user,
        requested_extensions=set(ctx.message.extensions or ()),
        state={"principal": ctx.principal, "claims": dict(ctx.principal.claims),
               "tenant": ctx.tenant},
    )
    return execution.RequestContext(
        request=_types().MessageSendParams.model_validate(params), task_id=ctx.task_id,
        context_id=ctx.context_id,
        task=task_to_pydantic(current) if current is not None else None,
        related_tasks=[task_to_pydantic(t) for t in related], call_context=call)


def card_dict(card: Any) -> dict[str, Any]:
    """An executor's card (a 0.3 pydantic ``AgentCard`` or its JSON dict) as a JSON dict."""
    if isinstance(card, dict):
        return card
    dumped: dict[str, Any] = card.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
