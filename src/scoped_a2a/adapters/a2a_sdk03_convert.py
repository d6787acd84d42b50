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
    Message,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from ..protocol.v03 import (
    Message03,
    message_from_v03,
    message_to_v03,
    task_to_v03,
)
from ..protocol.v03_results import (
    ArtifactUpdate03,
    StatusUpdate03,
    Task03,
    artifact_update_from_v03,
    status_update_from_v03,
    task_from_v03,
)
from ..runtime.context import RunContext

GENERATION = "0.3"
TASK_BEFORE_STATUS = False
"""0.3's server makes the task from its first status update (``TaskManager.ensure_task``), and
executors rely on it (BeeAI's sets ``context.current_task`` and sends ``submitted``)."""

OurEvent = Message | Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


def _types() -> Any:
    """``a2a.types`` of 0.3 (``Any``: see the module docstring)."""
    return importlib.import_module("a2a.types")


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
        return task_from_v03(_decode(data, Task03))
    if kind == "status-update":
        return status_update_from_v03(_decode(data, StatusUpdate03))
    if kind == "artifact-update":
        return artifact_update_from_v03(_decode(data, ArtifactUpdate03))
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
