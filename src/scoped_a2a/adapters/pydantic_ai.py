"""Serve an unchanged pydantic-ai ``Agent`` on scoped-a2a: ``A2AApp(from_pydantic_ai(agent))``.

Each A2A run is one ``agent.run_stream_events(...)`` inside the run's cancel scope:

- the model's streamed text becomes chunks of a ``reply`` artifact, function-tool calls and
  their results become trajectory events, live (:mod:`.pydantic_ai_events`);
- a ``str`` output completes the task with that text; any other output (an ``output_type``
  such as a pydantic model) becomes an ``output`` artifact holding one data part, its JSON;
- the conversation is kept per context id and owner (:mod:`.pydantic_ai_history`), so a
  follow-up message in the same context sees the earlier turns;
- ``deps(ctx)`` builds the agent's dependencies for each run (sync or async).

Cancellation (hang-up, CancelTask, deadline, shutdown) cancels the pydantic-ai run: leaving
``run_stream_events`` cancels its background task and waits, shielded, until it has unwound,
so a model request in flight is aborted and its HTTP connection closed before the run is
recorded ``canceled``. A model or tool error fails the task; the caller sees the error's type
and an error id, never its text (unless the app exposes errors).

pydantic-ai runs on asyncio only (its runs are asyncio tasks): on trio a run fails at once with
a line saying to use ``--backend asyncio``, and ``serve`` refuses to start.

This module does not import pydantic-ai until an agent is adapted, so :func:`recognises` can be
asked about any object at no cost.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..protocol.types import Message, Part
from ..runtime.context import RunContext
from .base import AdaptedAgent
from .pydantic_ai_events import OUTPUT_ARTIFACT, ReplyStream, forward
from .pydantic_ai_history import HistoryKey, HistoryStore, MemoryHistory
from .trajectory import MEDIA_INPUT_MODES, jsonable

__all__ = ["HistoryStore", "MemoryHistory", "PydanticAIAgent", "from_pydantic_ai",
           "recognises"]

DepsHook = Callable[[RunContext], Any]
"""``deps(ctx)`` -> the agent's ``deps`` for this run, or an awaitable of them."""

DESCRIPTION_CHARS = 300
"""At most this much of the agent's own ``description`` becomes the card's description."""


def recognises(obj: object) -> bool:
    """True when ``obj`` is a pydantic-ai agent (an ``AbstractAgent``: ``Agent``, a wrapper).

    Never imports pydantic-ai: an object can only be one of its agents if pydantic-ai is
    already imported.
    """
    module = sys.modules.get("pydantic_ai.agent")
    abstract = getattr(module, "AbstractAgent", None)
    return isinstance(abstract, type) and isinstance(obj, abstract)


def from_pydantic_ai(
    agent: Any,
    *,
    deps: DepsHook | None = None,
    history: HistoryStore | None = None,
    name: str | None = None,
    description: str | None = None,
    skills: Sequence[dict[str, Any]] | None = None,
) -> PydanticAIAgent:
    """Adapt a pydantic-ai ``agent`` into an agent of this project.

    ``deps``: called with the :class:`~scoped_a2a.RunContext` of each run; its result (awaited
    if it is awaitable) is the run's ``deps``. Absent: the run gets no deps.
    ``history``: where conversations are kept (default: a :class:`MemoryHistory`, 1,000
    conversations of up to 50 turns each, in this process); any :class:`HistoryStore`.
    ``name``, ``description``, ``skills``: card fields, overriding those taken from the agent.

    Raises TypeError when ``agent`` is not a pydantic-ai agent.
    """
    if not recognises(agent):
        raise TypeError(
            f"from_pydantic_ai() needs a pydantic-ai Agent, not {type(agent).__name__}")
    return PydanticAIAgent(agent, deps=deps, history=history, name=name,
                           description=description, skills=skills)


class PydanticAIAgent(AdaptedAgent):
    """A pydantic-ai agent as an agent of this project (build it with :func:`from_pydantic_ai`)."""

    framework: ClassVar[str] = "pydantic-ai"

    def __init__(
        self,
        agent: Any,
        *,
        deps: DepsHook | None = None,
        history: HistoryStore | None = None,
        name: str | None = None,
        description: str | None = None,
        skills: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self.agent = agent
        self.deps = deps
        self.history: HistoryStore = history if history is not None else MemoryHistory()
        self._name = name
        self._description = description
        self._skills = [dict(s) for s in skills] if skills is not None else None

    async def run(self, ctx: RunContext) -> str | None:
        """One turn of the conversation: the agent answers ``ctx.message``.

        Cancellation ends the pydantic-ai run (its model call aborted) and records no turn.
        Errors (the model's, a tool's, the deps hook's, the history store's) fail the task.
        """
        deps = await self._deps_for(ctx)
        key: HistoryKey = (ctx.owner, ctx.context_id)  # per caller and tenant
        earlier = list(await self.history.load(key))
        reply = ReplyStream(ctx)
        result: Any = None
        async with self.agent.run_stream_events(
            user_prompt(ctx.message), message_history=earlier or None, deps=deps,
        ) as events:
            async for event in events:
                if getattr(event, "event_kind", None) == "agent_run_result":
                    result = event.result
                else:
                    await forward(event, ctx, reply)
        await reply.close()
        if result is None:  # pragma: no cover - pydantic-ai always ends with the result event
            raise RuntimeError("pydantic-ai ended the run without a result")
        await self.history.append(key, result.new_messages())
        output = result.output
        if isinstance(output, str):
            return output
        if output is not None:
            await ctx.artifact(data=jsonable(output), name=OUTPUT_ARTIFACT)
        return None

    async def _deps_for(self, ctx: RunContext) -> Any:
        if self.deps is None:
            return None
        made = self.deps(ctx)
        if inspect.isawaitable(made):
            made = await made
        return made

    def card_fields(self) -> dict[str, Any]:
        """Name, description and one skill, from the agent unless given to the adapter.

        The description is the one given to the adapter, else the agent's own
        ``description``, else a generic line. Never its instructions or system prompt: the
        card is public, and a prompt is the agent's private configuration.
        """
        name = self._name or getattr(self.agent, "name", None) or "pydantic-ai agent"
        description = (self._description or _agent_description(self.agent)
                       or "A pydantic-ai agent served by scoped-a2a.")
        skills = self._skills
        if skills is None:
            skill_id = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "chat"
            skills = [{"id": skill_id, "name": name, "description": description,
                       "tags": ["chat", "pydantic-ai"]}]
        # The caller's file parts reach the model as pydantic-ai content (images, audio,
        # video, documents: user_prompt): the card accepts what is forwarded.
        return {"name": name, "description": description, "skills": skills,
                "defaultInputModes": list(MEDIA_INPUT_MODES)}


def _agent_description(agent: Any) -> str | None:
    """The agent's own ``description`` (shortened), or None."""
    described = getattr(agent, "description", None)
    if isinstance(described, str) and described.strip():
        return _shorten(described)
    return None


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= DESCRIPTION_CHARS:
        return text
    return text[: DESCRIPTION_CHARS - 1].rsplit(" ", 1)[0] + "…"


def user_prompt(message: Message) -> str | list[Any]:
    """The A2A message as pydantic-ai's ``user_prompt``.

    Text only: the text (parts joined by newlines). Otherwise a list: text as is, data parts
    as their JSON text, files as ``BinaryContent`` (inline bytes) or as an ``ImageUrl`` /
    ``AudioUrl`` / ``VideoUrl`` / ``DocumentUrl`` by media type (a URL).
    """
    parts: list[Part] = message.parts
    if all(p.text is not None for p in parts):
        return message.text
    import json

    from pydantic_ai import AudioUrl, BinaryContent, DocumentUrl, ImageUrl, VideoUrl

    content: list[Any] = []
    for p in parts:
        media = p.media_type or ""
        if p.text is not None:
            content.append(p.text)
        elif p.data is not None:
            content.append(json.dumps(p.data, ensure_ascii=False))
        elif p.raw is not None:
            content.append(BinaryContent(data=p.raw,
                                         media_type=media or "application/octet-stream"))
        elif p.url is not None:
            kind = {"image": ImageUrl, "audio": AudioUrl, "video": VideoUrl}.get(
                media.partition("/")[0], DocumentUrl)
            content.append(kind(url=p.url, media_type=media or None))
    return content
