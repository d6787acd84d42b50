"""pydantic-ai agents for the adapter's tests, offline: ``TestModel`` and ``FunctionModel``.

Each scripted model is a ``stream_function`` (the adapter streams every model request).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.test import TestModel

from .adapter_helpers import Gate


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)]


def user_prompts(messages: list[ModelMessage]) -> list[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPromptPart)]


def chunked(*chunks: str) -> Agent:
    """Streams ``chunks`` as the model's text."""
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for chunk in chunks:
            yield chunk

    return Agent(FunctionModel(stream_function=stream), name="chunker")


def remembering() -> Agent:
    """Answers with every user prompt it has seen in the conversation, joined by ' | '."""
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield " | ".join(user_prompts(messages))

    return Agent(FunctionModel(stream_function=stream), system_prompt="You remember.")


class Weather(BaseModel):
    city: str
    celsius: int


def structured() -> Agent:
    return Agent(TestModel(custom_output_args={"city": "Paris", "celsius": 21}),
                 output_type=Weather, name="forecaster")


def tool_user(gate: Gate) -> Agent:
    """Calls ``lookup(city="Paris")`` (which waits on ``gate``), then says what it found."""
    async def stream(messages: list[ModelMessage], info: AgentInfo
                     ) -> AsyncIterator[str | DeltaToolCalls]:
        returns = tool_returns(messages)
        if not returns:
            yield "Let me look. "
            yield {0: DeltaToolCall(name="lookup", json_args='{"city": "Paris"}',
                                    tool_call_id="call-1")}
        else:
            yield f"Found: {returns[-1].content}"

    agent = Agent(FunctionModel(stream_function=stream), name="looker",
                  instructions="You look things up.")

    @agent.tool_plain
    async def lookup(city: str) -> str:
        await gate.hold()
        return f"sunny in {city}"

    return agent


def stalling(gate: Gate) -> Agent:
    """Streams one chunk, then the model hangs (in ``gate``) until released or cancelled."""
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "thinking"
        await gate.hold()
        yield " done"

    return Agent(FunctionModel(stream_function=stream), name="staller")


def leaky_failure() -> Agent:
    """A tool that raises with a secret in its message."""
    async def stream(messages: list[ModelMessage], info: AgentInfo
                     ) -> AsyncIterator[str | DeltaToolCalls]:
        yield {0: DeltaToolCall(name="connect", json_args="{}", tool_call_id="call-9")}

    agent = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    def connect() -> str:
        raise RuntimeError("cannot reach postgres://admin:hunter2@db.internal")

    return agent


def with_deps() -> Agent:
    """Calls its one tool, which returns the run's deps (TestModel then answers with them)."""
    agent = Agent(TestModel(), deps_type=str)

    @agent.tool
    def whoami(ctx: RunContext[str]) -> str:
        return ctx.deps

    return agent


def prompt_recorder(seen: list[object]) -> Agent:
    """Records the user prompt's content as the model receives it; answers "ok"."""
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.extend(p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                    if isinstance(p, UserPromptPart))
        yield "ok"

    return Agent(FunctionModel(stream_function=stream))
