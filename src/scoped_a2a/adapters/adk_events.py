"""How one Google ADK run reaches its A2A task: the message in, ADK's events out.

Imported by :mod:`.adk` only when an ADK agent is adapted (it imports ``google.genai``).

Out, event by event (:class:`Relay`):

- Model text streams as artifact chunks, one artifact per model response (named after the ADK
  agent that wrote it): each partial event's text is a chunk (``append`` after the first), and
  the aggregated event ADK sends at the end of the response closes the artifact
  (``last_chunk``) with only what the chunks did not already carry, so no text is sent twice.
  A model that does not stream gives one whole artifact per response.
- Function calls and function responses become live-trajectory events (``tool_call``,
  ``tool_result``), recorded from the aggregated event, once each; arguments or results over
  :data:`~.trajectory.MAX_EVENT_CHARS` of JSON are cut to a preview.
- The reply (the task's status message) is the text of the last final response.
- An event carrying a model error (``error_code``) fails the run once ADK has finished, with the
  code only (the model's message goes to the log: it may hold internals).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.genai import types

from ..protocol.types import Message
from ..runtime.failures import AgentError
from .trajectory import tool_call, tool_result

if TYPE_CHECKING:
    from google.adk.events import Event

    from ..runtime.context import RunContext

log = logging.getLogger("scoped_a2a.adapters.adk")


def to_content(message: Message) -> types.Content:
    """The A2A message as the user's turn in ADK: text parts as text, data parts as their JSON
    text, files inline (``raw``) or by reference (``url``), with their media type and name."""
    parts: list[types.Part] = []
    for part in message.parts:
        if part.text is not None:
            parts.append(types.Part(text=part.text))
        elif part.data is not None:
            parts.append(types.Part(text=json.dumps(part.data, ensure_ascii=False)))
        elif part.raw is not None:
            parts.append(types.Part(inline_data=types.Blob(
                data=part.raw, mime_type=part.media_type or "application/octet-stream",
                display_name=part.filename)))
        elif part.url is not None:
            parts.append(types.Part(file_data=types.FileData(
                file_uri=part.url, mime_type=part.media_type, display_name=part.filename)))
    return types.Content(role="user", parts=parts)


def response_text(event: Event) -> str:
    """The event's answer text: its text parts joined, thoughts left out."""
    if event.content is None or not event.content.parts:
        return ""
    return "".join(p.text for p in event.content.parts if p.text and not p.thought)


@dataclass
class _Streaming:
    """One model response being streamed as one artifact."""

    artifact_id: str
    sent: str


class Relay:
    """Feeds one run's ADK events to its :class:`~scoped_a2a.RunContext` (see the module doc).

    Every ``feed`` awaits the run's log, so a cancelled run stops here at its next event.
    """

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        # Keyed by author and branch: the sub-agents of a ParallelAgent stream at once.
        self._open: dict[tuple[str, str | None], _Streaming] = {}
        self._error: str | None = None
        self.reply: str | None = None
        """The text of the last final response (None before one)."""

    async def feed(self, event: Event) -> None:
        key = (event.author, event.branch)
        text = response_text(event)
        if event.partial:
            if text:
                await self._chunk(key, event.author, text)
            return  # function calls are recorded once, from the aggregated event
        if event.error_code or event.error_message:
            self._error = str(event.error_code or "unknown")
            log.warning("model error on task %s (agent %s): %s %s", self._ctx.task_id,
                        event.author, event.error_code, event.error_message)
        await self._close(key, event.author, text)
        for call in event.get_function_calls():
            await self._ctx.trajectory(
                tool_call(call.name, call.args or {}, call.id, agent=event.author))
        for result in event.get_function_responses():
            await self._ctx.trajectory(
                tool_result(result.name, result.response, result.id, agent=event.author))
        if event.is_final_response() and text:
            self.reply = text
            if not (event.error_code or event.error_message):
                self._error = None  # a later answer stands: the agent recovered

    async def end(self) -> str | None:
        """Close what is still streaming (a model that never sent its aggregated response);
        return the reply. Raises :class:`AgentError` naming the model's error code if the
        run's last answer was a model error."""
        for key in list(self._open):
            await self._close(key, key[0], "")
        if self._error is not None:
            raise AgentError(f"the model answered with an error ({self._error}); the server "
                             "log has its message")
        return self.reply

    async def _chunk(self, key: tuple[str, str | None], author: str, text: str) -> None:
        streaming = self._open.get(key)
        if streaming is None:
            artifact_id = await self._ctx.artifact(text, name=author, last_chunk=False)
            self._open[key] = _Streaming(artifact_id, text)
        else:
            await self._ctx.artifact(text, append=True, last_chunk=False,
                                     artifact_id=streaming.artifact_id)
            streaming.sent += text

    async def _close(self, key: tuple[str, str | None], author: str, text: str) -> None:
        """End the model response ``key`` whose whole text is ``text``."""
        streaming = self._open.pop(key, None)
        if streaming is None:
            if text:
                await self._ctx.artifact(text, name=author)
        elif not text or text.startswith(streaming.sent):
            # The aggregate repeats the chunks (perhaps with more): only the rest is sent. No
            # text (end() closing a stream, a model that leaves text out of its aggregate):
            # the chunks stand as they are.
            await self._ctx.artifact(text[len(streaming.sent):] if text else "", append=True,
                                     artifact_id=streaming.artifact_id)
        else:
            # The aggregate differs from the chunks (a model that rewrites its stream): an
            # update that does not append replaces the artifact, so it ends up right.
            await self._ctx.artifact(text, name=author, artifact_id=streaming.artifact_id)
