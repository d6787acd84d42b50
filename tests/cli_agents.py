"""Agents importable by ``python -m scoped_a2a serve --agent tests.cli_agents:NAME``."""

from __future__ import annotations

import anyio

from scoped_a2a import RunContext


async def one_second(ctx: RunContext) -> str:
    for i in range(10):
        await anyio.sleep(0.1)
        await ctx.trajectory({"step": i})
    return f"finished {ctx.text}"


async def chunked(ctx: RunContext) -> str:
    """An artifact in chunks as ADK streams one: named on the first chunk only, then appended
    chunks by id, then an empty last chunk."""
    art = await ctx.artifact("Hel", name="reply", last_chunk=False)
    await ctx.artifact("lo", append=True, last_chunk=False, artifact_id=art)
    await ctx.artifact("", append=True, last_chunk=True, artifact_id=art)
    return "done"


CHUNK = "x" * (100 << 10)


async def burst(ctx: RunContext) -> str:
    """32 artifacts of 100 KiB (3.2 MiB a task): a burst of these is the memory test's load."""
    for i in range(32):
        await ctx.artifact(CHUNK + str(i), name=f"a{i}")
    return "done"
