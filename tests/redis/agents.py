"""Agents the Redis tests run in server and worker processes (``--agent tests.redis.agents:X``).

Every run first logs a ``start`` trajectory event with its process id and attempt number, so a
test can count how many times, where, and as which attempt each task was executed.
"""

from __future__ import annotations

import os

import anyio

from scoped_a2a import RunContext


async def probe_agent(ctx: RunContext) -> str:
    """``sleep N``: one silent N-second sleep (no writes, so only a cancel signal can end it);
    ``first-sleep N``: the same on the first attempt only (a retry finishes at once);
    ``tick N``: a trajectory event every 0.05 s for N seconds; ``sleep-in PID N``: the sleep
    in process PID only (run again elsewhere, it finishes at once); ``ask [N]``: asks a question,
    (sleeps N seconds,) and answers with what it got; anything else: a short run."""
    await ctx.trajectory({"type": "start", "pid": os.getpid(), "attempt": ctx.attempt})
    words = ctx.text.split()
    if words and (words[0] == "sleep" or (words[0] == "first-sleep" and ctx.attempt == 1)):
        await anyio.sleep(float(words[1]))
    elif words[:1] == ["sleep-in"] and int(words[1]) == os.getpid():
        await anyio.sleep(float(words[2]))
    elif words[:1] == ["ask"]:
        answer = await ctx.ask("your name?")
        if len(words) > 1:  # ``ask N``: then a silent N-second sleep
            await anyio.sleep(float(words[1]))
        return f"hi {answer} pid={os.getpid()}"
    elif words and words[0] == "tick":
        for i in range(max(1, int(float(words[1]) / 0.05))):
            await anyio.sleep(0.05)
            await ctx.trajectory({"type": "tick", "i": i})
    else:
        await anyio.sleep(0.01)
        await ctx.artifact(ctx.text, name="echo")
    return f"done pid={os.getpid()} attempt={ctx.attempt}"
