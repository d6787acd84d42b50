"""The agent the exactly-once Redis tests serve (``--agent tests.redis.resend_agents:agent``).

Every run logs ``agent run task=<id> text=<text>``, every answer to its question ``agent answer
task=<id> text=<answer>``, so a test counts runs and deliveries from the process logs.
"""

from __future__ import annotations

import logging

import anyio

from scoped_a2a import RunContext

log = logging.getLogger("scoped_a2a.test_agent")


async def agent(ctx: RunContext) -> str:
    """``ask``: asks for a name; ``sleep N``: sleeps N seconds; anything else: a short run."""
    log.info("agent run task=%s text=%s", ctx.task_id, ctx.text)
    words = ctx.text.split()
    if words == ["ask"]:
        answer = await ctx.ask("your name?")
        log.info("agent answer task=%s text=%s", ctx.task_id, answer)
        return f"hi {answer}"
    if words and words[0] == "sleep":
        await anyio.sleep(float(words[1]))
    else:
        await anyio.sleep(0.005)
    return f"done {ctx.text}"
