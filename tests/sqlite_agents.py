"""An agent for the SQLite restart tests (``--agent tests.sqlite_agents:progress_agent``)."""

from __future__ import annotations

import anyio

from scoped_a2a import RunContext


async def progress_agent(ctx: RunContext) -> str:
    """``progress N``: a working status with the attempt, then N progress updates 0.05 s apart
    (each a status event, so every one of them is streamed)."""
    words = ctx.text.split()
    await ctx.working(f"attempt {ctx.attempt}")
    for i in range(int(words[1]) if len(words) > 1 else 10):
        await anyio.sleep(0.05)
        await ctx.working(f"step {i}")
    return f"done attempt={ctx.attempt}"
