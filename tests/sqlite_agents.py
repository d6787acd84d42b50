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


async def bulky_agent(ctx: RunContext) -> str:
    """``bulky S N``: sleep S seconds, then N artifacts of 64 KiB each (writes that need room
    on the disk); anything else: a short answer."""
    words = ctx.text.split()
    if words and words[0] == "bulky":
        await anyio.sleep(float(words[1]))
        for i in range(int(words[2])):
            await ctx.working(f"chunk {i}")
            await ctx.artifact("x" * (64 << 10), name=f"chunk{i}")
    return "done"
