"""A Google ADK agent with one tool, its model any OpenAI-compatible endpoint, served here.

Serve it (from the repository's root; the model's URL and key from the environment)::

    MODEL_URL=http://127.0.0.1:11434/v1 MODEL_NAME=llama3.2 \\
        python -m scoped_a2a serve --backend asyncio --agent examples.adk_agent.agent:agent

or as a script, with flags: ``python examples/adk_agent/agent.py --model-url URL --model NAME``.
The key, if the endpoint wants one, is read from ``MODEL_API_KEY`` (or ``OPENAI_API_KEY``).

Offline, with no model and no key: serve the fake endpoint of ``scoped_a2a.testing.fake_llm``
(it answers "(fake model) you said: ..."; ``--tool get_weather --args '{"city": "Paris"}'``
has it call the tool first) in another terminal, and point ``MODEL_URL`` at it::

    python -m scoped_a2a.testing.fake_llm --port 8001
    MODEL_URL=http://127.0.0.1:8001/v1 MODEL_NAME=fake python -m scoped_a2a serve \\
        --backend asyncio --agent examples.adk_agent.agent:agent

``root_agent`` is a plain ADK ``LlmAgent`` (``adk web`` finds it under that name too); ``agent``
is the same agent adapted by ``from_adk``: nothing in the agent changes to serve it here.

The model: ADK's built-in route to OpenAI-compatible endpoints is LiteLLM, a large dependency.
:class:`ChatCompletionsModel` is a small ADK ``BaseLlm`` instead: it calls
``POST {MODEL_URL}/chat/completions`` with ``stream: true`` through httpx (a client per call)
and hands ADK the text as it arrives, then the whole response with its tool calls. When the
run is cancelled (the caller hangs up, CancelTask, shutdown) the call's connection is closed.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator
from typing import Any

import httpx
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from scoped_a2a.adapters.adk import from_adk

DEFAULT_URL = "http://127.0.0.1:11434/v1"  # Ollama's OpenAI-compatible API


class ModelCallFailed(Exception):
    """The endpoint answered with an HTTP error (the caller sees the type and an error id)."""


class ChatCompletionsModel(BaseLlm):
    """An ADK model that streams from an OpenAI-compatible chat-completions endpoint."""

    model: str = "gpt-4o-mini"
    base_url: str = DEFAULT_URL
    api_key: str | None = None
    timeout: float = 120.0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        body: dict[str, Any] = {
            "model": llm_request.model or self.model,
            "messages": _messages(llm_request),
            "stream": True,
        }
        tools = _tools(llm_request)
        if tools:
            body["tools"] = tools
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        text, calls, usage = "", {}, None
        async with (
            httpx.AsyncClient(timeout=self.timeout) as client,
            client.stream("POST", self.base_url.rstrip("/") + "/chat/completions",
                          json=body, headers=headers) as response,
        ):
            if response.status_code >= 400:
                await response.aread()
                raise ModelCallFailed(f"the model endpoint answered {response.status_code}: "
                                      f"{response.text[:200]}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        text += delta["content"]
                        if stream:  # the text as it arrives; ADK relays it as partial events
                            yield LlmResponse(partial=True, content=types.Content(
                                role="model", parts=[types.Part(text=delta["content"])]))
                    for call in delta.get("tool_calls") or []:
                        slot = calls.setdefault(call.get("index", 0),
                                                {"id": None, "name": "", "arguments": ""})
                        slot["id"] = call.get("id") or slot["id"]
                        function = call.get("function") or {}
                        slot["name"] += function.get("name") or ""
                        slot["arguments"] += function.get("arguments") or ""
        parts = [types.Part(text=text)] if text else []
        for slot in calls.values():
            parts.append(types.Part(function_call=types.FunctionCall(
                id=slot["id"], name=slot["name"], args=json.loads(slot["arguments"] or "{}"))))
        yield LlmResponse(  # the whole response, as ADK expects after the partial ones
            content=types.Content(role="model", parts=parts), partial=False,
            turn_complete=True, usage_metadata=_usage(usage))


def _messages(request: LlmRequest) -> list[dict[str, Any]]:
    """ADK's conversation as chat-completions messages."""
    messages: list[dict[str, Any]] = []
    system = request.config.system_instruction if request.config else None
    if isinstance(system, str) and system:
        messages.append({"role": "system", "content": system})
    for content in request.contents:
        parts = content.parts or []
        text = "".join(p.text for p in parts if p.text and not p.thought)
        calls = [p.function_call for p in parts if p.function_call]
        for p in parts:
            if p.function_response:
                messages.append({"role": "tool", "tool_call_id": p.function_response.id,
                                 "content": json.dumps(p.function_response.response)})
        if content.role == "model":
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": json.dumps(c.args or {})}}
                    for c in calls]
            messages.append(message)
        elif text:
            messages.append({"role": "user", "content": text})
    return messages


def _tools(request: LlmRequest) -> list[dict[str, Any]]:
    """The agent's tools as chat-completions function tools."""
    tools = []
    for tool in (request.config.tools or []) if request.config else []:
        for decl in getattr(tool, "function_declarations", None) or []:
            schema = decl.parameters_json_schema or (
                _lower_types(decl.parameters.model_dump(mode="json", exclude_none=True))
                if decl.parameters else {"type": "object", "properties": {}})
            tools.append({"type": "function", "function": {
                "name": decl.name, "description": decl.description or "", "parameters": schema}})
    return tools


def _lower_types(schema: Any) -> Any:
    """A genai ``Schema`` dump as JSON Schema (its types are upper case: ``STRING``)."""
    if isinstance(schema, dict):
        return {k: v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def _usage(usage: dict[str, Any] | None) -> types.GenerateContentResponseUsageMetadata:
    usage = usage or {}
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=usage.get("prompt_tokens", 0),
        candidates_token_count=usage.get("completion_tokens", 0),
        total_token_count=usage.get("total_tokens", 0))


# --- the agent --------------------------------------------------------------------------------

CITIES = {"paris": "sunny, 21 °C", "london": "light rain, 14 °C", "tokyo": "cloudy, 18 °C"}


def get_weather(city: str) -> dict[str, str]:
    """The current weather of a city (canned answers for a few cities).

    Args:
      city: the city's name, e.g. Paris.
    """
    found = CITIES.get(city.strip().lower())
    return {"city": city, "weather": found} if found else {"city": city, "error": "unknown city"}


def build(model_url: str, model: str, api_key: str | None = None) -> LlmAgent:
    return LlmAgent(
        name="weather_agent",
        description="Answers questions about the weather in a few cities.",
        instruction="Answer briefly. Call get_weather for any question about the weather.",
        model=ChatCompletionsModel(model=model, base_url=model_url, api_key=api_key),
        tools=[get_weather],
    )


root_agent = build(
    os.environ.get("MODEL_URL", DEFAULT_URL),
    os.environ.get("MODEL_NAME", "gpt-4o-mini"),
    os.environ.get("MODEL_API_KEY") or os.environ.get("OPENAI_API_KEY"),
)
agent = from_adk(root_agent)


def main() -> None:
    import argparse
    from functools import partial

    import anyio

    from scoped_a2a import A2AApp, serve

    parser = argparse.ArgumentParser(description="Serve the ADK weather agent over A2A.")
    parser.add_argument("--model-url", default=os.environ.get("MODEL_URL", DEFAULT_URL),
                        help="base URL of an OpenAI-compatible API (env MODEL_URL)")
    parser.add_argument("--model", default=os.environ.get("MODEL_NAME", "gpt-4o-mini"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    key = os.environ.get("MODEL_API_KEY") or os.environ.get("OPENAI_API_KEY")
    app = A2AApp(from_adk(build(args.model_url, args.model, key)))
    anyio.run(partial(serve, app, host=args.host, port=args.port), backend="asyncio")


if __name__ == "__main__":
    main()
