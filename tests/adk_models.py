"""Offline Google ADK models for the adapter tests: a ``BaseLlm`` that streams scripted parts.

``ScriptedLlm(script=[[...], [...]])`` answers its n-th call with ``script[n]`` (the last one
repeats): a ``str`` is a streamed text chunk, :class:`Call` a function call, :data:`GATE` waits
until the test sets ``probe.gate`` (a run held in flight), :class:`Boom` raises,
:class:`ModelError` answers with a model error, :class:`Final` sets the aggregated text. The shared
:class:`Probe` records each request and whether a call in flight was cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from .adapter_helpers import Gate


@dataclass
class Call:
    name: str
    args: dict[str, Any]
    id: str = "call-1"


@dataclass
class Boom:
    message: str


@dataclass
class ModelError:
    """The model answers with an error (as Gemini does for a blocked response)."""

    code: str
    message: str


@dataclass
class Final:
    """The aggregated response's text, other than the chunks joined (a model that rewrites
    its stream)."""

    text: str


GATE = "<gate>"


@dataclass
class Probe(Gate):
    """The model's gate (a call that reaches GATE holds there) and the requests it got."""

    requests: list[LlmRequest] = field(default_factory=list)


class ScriptedLlm(BaseLlm):
    model: str = "scripted"
    script: list[list[Any]]
    probe: Any = None

    def model_post_init(self, context: Any) -> None:
        if self.probe is None:
            self.probe = Probe()

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        probe: Probe = self.probe
        probe.requests.append(llm_request)
        items = self.script[min(len(probe.requests), len(self.script)) - 1]
        text, calls, final = "", [], None
        for item in items:
            if isinstance(item, str) and item == GATE:
                await probe.hold()
            elif isinstance(item, str):
                text += item
                if stream:
                    yield LlmResponse(partial=True, content=types.Content(
                        role="model", parts=[types.Part(text=item)]))
            elif isinstance(item, Call):
                calls.append(types.Part(function_call=types.FunctionCall(
                    name=item.name, args=item.args, id=item.id)))
            elif isinstance(item, Boom):
                raise RuntimeError(item.message)
            elif isinstance(item, Final):
                final = item.text
            elif isinstance(item, ModelError):
                yield LlmResponse(error_code=item.code, error_message=item.message)
                return
        text = text if final is None else final
        parts = ([types.Part(text=text)] if text else []) + calls
        yield LlmResponse(
            content=types.Content(role="model", parts=parts), partial=False, turn_complete=True,
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1, candidates_token_count=1, total_token_count=2))


def request_texts(request: LlmRequest) -> list[tuple[str, str]]:
    """The conversation a model call saw, as (role, text) pairs (text parts only)."""
    return [(c.role or "", "".join(p.text for p in c.parts or [] if p.text))
            for c in request.contents if any(p.text for p in c.parts or [])]
