"""What the framework adapters share about a run's trajectory and card (no framework import).

- :func:`tool_call` / :func:`tool_result`: the live-trajectory events of a tool call and its
  result, the same shape whichever framework ran the tool (``type``, ``tool``, ``id``, then
  ``args`` or ``content``, then what the framework adds: the ADK agent that called it, the
  outcome pydantic-ai reports).
- :func:`bounded`: a tool's arguments or result as JSON data, cut to a preview past
  :data:`MAX_EVENT_CHARS`.
- :data:`MEDIA_INPUT_MODES`: the media types a card accepts for an adapter that forwards the
  caller's file parts to its model.
"""

from __future__ import annotations

import json
from typing import Any

MAX_EVENT_CHARS = 8000
"""A tool's arguments or result longer than this (as JSON) is cut in its trajectory event, so
one large result cannot swell the task's log; the model still sees the whole of it."""

MEDIA_INPUT_MODES = ("text/plain", "application/json", "image/*", "audio/*", "video/*",
                     "application/pdf", "text/*")
"""The media types a served ADK or pydantic-ai agent's card accepts: text and data parts, and
the files its content conversion forwards to the model (the model says what it can read: a
part it cannot is an error of the run, not of the send)."""


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (pydantic models, dataclasses, datetimes included; what
    JSON cannot carry becomes its ``repr``).

    Imports ``pydantic_core`` (not a core dependency: both frameworks that call this bring it).
    """
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=repr)


def bounded(value: Any) -> Any:
    """``value`` as JSON data, or a cut preview of its JSON text when that is too long."""
    data = jsonable(value)
    text = json.dumps(data, ensure_ascii=False)
    if len(text) <= MAX_EVENT_CHARS:
        return data
    return {"truncated": True, "chars": len(text), "preview": text[:MAX_EVENT_CHARS]}


def tool_call(tool: str | None, args: Any, call_id: str | None,
              **extra: Any) -> dict[str, Any]:
    """The trajectory event of a call of ``tool`` with ``args`` (bounded)."""
    return {"type": "tool_call", "tool": tool, "args": bounded(args), "id": call_id, **extra}


def tool_result(tool: str | None, content: Any, call_id: str | None,
                **extra: Any) -> dict[str, Any]:
    """The trajectory event of ``tool``'s result ``content`` (bounded)."""
    return {"type": "tool_result", "tool": tool, "id": call_id, "content": bounded(content),
            **extra}
