"""Agents importable by ``python -m scoped_a2a serve --agent tests.cli_agents:NAME``."""

from __future__ import annotations

import anyio

from scoped_a2a import RunContext


async def one_second(ctx: RunContext) -> str:
    for i in range(10):
        await anyio.sleep(0.1)
        await ctx.trajectory({"step": i})
    return f"finished {ctx.text}"
