"""pydantic-ai's run events as this runtime's: reply chunks and trajectory events.

Events are told apart by their ``event_kind`` discriminator (a stable string in pydantic-ai's
event classes), so this module imports nothing from pydantic-ai.

- Text the model streams (``part_start`` of a text part, ``part_delta`` with a text delta)
  becomes chunks of one artifact named ``reply``, each sent as it arrives: the first chunk
  opens it, the rest append. Whether a chunk is the last is only known when the run ends, so
  the reply is closed then by an empty chunk marked ``last_chunk`` (holding each chunk back
  until the next would keep a caller waiting on text the model already sent, for as long as a
  slow model or a tool takes). Text the model writes before a tool call is part of the reply.
- A function-tool call and its result become trajectory events
  (``{"type": "tool_call", ...}``, ``{"type": "tool_result", ...}``) as they happen, so a
  follower sees them live. Output tools (pydantic-ai's way of returning structured output) are
  not tool calls of the agent and are left out.
"""

from __future__ import annotations

from typing import Any

from ..runtime.context import RunContext
from .trajectory import tool_call, tool_result

REPLY_ARTIFACT = "reply"
"""Name of the artifact the model's streamed text goes to."""

OUTPUT_ARTIFACT = "output"
"""Name of the artifact a structured (non-str) output goes to, as a data part."""

def tool_call_event(part: Any) -> dict[str, Any]:
    """The trajectory event of a ``ToolCallPart`` (its arguments as a JSON object)."""
    # args_as_dict() never raises: arguments that are not JSON come back as {"INVALID_JSON": ...}
    return tool_call(part.tool_name, part.args_as_dict(), part.tool_call_id)


def tool_result_event(part: Any) -> dict[str, Any]:
    """The trajectory event of a ``ToolReturnPart`` (``outcome``: success, failed, retried...)."""
    outcome = getattr(part, "outcome", None)
    extra = {"outcome": outcome} if isinstance(outcome, str) else {}
    return tool_result(part.tool_name, part.content, part.tool_call_id, **extra)


def text_of(event: Any) -> str | None:
    """The text a ``part_start`` / ``part_delta`` event adds to the reply, if any."""
    kind = event.event_kind
    if kind == "part_start":
        part = event.part
        return part.content if getattr(part, "part_kind", None) == "text" else None
    if kind == "part_delta":
        delta = event.delta
        if getattr(delta, "part_delta_kind", None) == "text":
            text = delta.content_delta
            return text if isinstance(text, str) else None
    return None


class ReplyStream:
    """Sends the model's text as chunks of the ``reply`` artifact (see the module docstring).

    Cancellation: the reply stays as far as it got, with no chunk marked last. Errors: those
    of ``ctx.artifact``.
    """

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self._sent = 0
        self.text = ""
        """Every chunk so far, joined (what the caller's artifact holds once the run ends)."""

    async def add(self, text: str) -> None:
        """Send one chunk of the model's text at once."""
        if text:
            self.text += text
            await self._send(text, last=False)

    async def close(self) -> None:
        """Mark the reply complete: an empty chunk with ``last_chunk`` (none without a reply)."""
        if self._sent:
            await self._send("", last=True)

    async def _send(self, text: str, *, last: bool) -> None:
        await self._ctx.artifact(text, name=REPLY_ARTIFACT, append=self._sent > 0,
                                 last_chunk=last)
        self._sent += 1


async def forward(event: Any, ctx: RunContext, reply: ReplyStream) -> None:
    """Map one pydantic-ai run event onto the run (ignoring those with nothing to show)."""
    kind = getattr(event, "event_kind", None)
    if kind in ("part_start", "part_delta"):
        text = text_of(event)
        if text:
            await reply.add(text)
    elif kind == "function_tool_call":
        await ctx.trajectory(tool_call_event(event.part))
    elif kind == "function_tool_result":
        await ctx.trajectory(tool_result_event(event.part))
