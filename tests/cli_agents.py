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


_begun = 0


async def burst(ctx: RunContext) -> str:
    """32 artifacts of 100 KiB (3.2 MiB a task): a burst of these is the memory test's load.

    Sent ``together N``, a run first waits (20 s at most) until N such runs have begun, so they
    emit and end in step, as they do on a loaded machine: their blocking sends are still
    waiting for them when the last ones end."""
    global _begun
    if ctx.text.startswith("together "):
        _begun += 1
        with anyio.move_on_after(20):
            while _begun < int(ctx.text.split()[1]):
                await anyio.sleep(0.05)
    for i in range(32):
        await ctx.artifact(CHUNK + str(i), name=f"a{i}")
    return "done"
