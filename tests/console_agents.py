"""Agents for the console tests (``serve --agent tests.console_agents:ticking``)."""

from __future__ import annotations

import anyio

from scoped_a2a import RunContext


async def ticking(ctx: RunContext) -> str:
    """A trajectory event every 0.1 s until cancelled (or 60 s); ``quick ...`` returns at once."""
    if ctx.text.startswith("quick"):
        return f"done: {ctx.text}"
    for i in range(600):
        await ctx.trajectory({"tick": i})
        await anyio.sleep(0.1)
    return "ticked for a minute"
