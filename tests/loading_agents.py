"""Objects a new user points ``serve --agent`` at (tests/test_agent_loading.py)."""

from __future__ import annotations

from scoped_a2a import A2AApp, RunContext

from .sdk_executors import StreamingExecutor


async def one_arg(ctx: RunContext) -> str:
    return f"one arg: {ctx.text}"


async def two_args(ctx: RunContext, other: str) -> str:
    return other


app = A2AApp(one_arg, card={"name": "Set in code", "description": "a card given to A2AApp"})

executor = StreamingExecutor()

agent_card = {
    "name": "Executor card",
    "description": "the card the executor's module defines",
    "skills": [{"id": "echo", "name": "Echo", "description": "says it back", "tags": ["echo"]}],
}

not_an_agent = {"a": "dict"}
