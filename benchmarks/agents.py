"""The scoped-a2a agents the benchmarks serve (``--agent benchmarks.agents:bench_agent``).

The peers (``benchmarks/peers/``) implement the same commands in their own frameworks, so every
system does the same work. The first word of the message picks the behaviour:

- ``echo TEXT``: one artifact ``echo: TEXT``, then completed (scenario 1);
- ``stream N``: N small artifact chunks as fast as the server takes them (scenario 2);
- ``slow KEY SECONDS``: signals ``start``, sleeps; if cancelled it signals ``cancel`` stamped
  with the moment it observed the cancellation (scenario 3);
- ``fanout KEY M INTERVAL``: signals ``start``, waits for its go-file, then emits M artifact
  chunks INTERVAL apart, each carrying ``@T<monotonic emit time>@`` (scenario 5);
- ``event KEY SECONDS``: a CRM system event; works for SECONDS in ten steps, then signals
  ``done`` (or ``cancel`` if cancelled) (scenario 7);
- ``hop KEY SECONDS URL...``: with URLs left, calls the first (``ctx.call``) with the rest;
  the last hop acts as ``slow KEY SECONDS`` (the chain scenario);
- ``work SECONDS``: a turn with a live trajectory: a trajectory event every 50 ms for SECONDS,
  then a reply (the steps of scenarios 4 and 6 follow it);
- ``chatter S T``: S small status updates (``working`` with a short progress message) and T
  small trajectory events, interleaved, as fast as the store takes them, then a reply (the
  stored-memory scenario 13 keeps thousands of these).

Every wait is an ``anyio.sleep``: a cancelled run ends at once.
"""

from __future__ import annotations

import os
import time

import anyio

from scoped_a2a import RunContext

from .sidechannel import go_file, signal

GO_POLL = 0.002
"""Seconds between looks at a go-file."""
GO_TIMEOUT = 120.0


async def echo_agent(ctx: RunContext) -> None:
    await ctx.artifact(f"echo: {ctx.text}", name="echo")


async def stream_agent(ctx: RunContext) -> None:
    words = ctx.text.split()
    n = int(words[1]) if len(words) > 1 else 100
    for i in range(n):
        await ctx.artifact(f"{i} ", name="stream", append=i > 0, last_chunk=i == n - 1)


async def slow_agent(ctx: RunContext) -> None:
    _, key, seconds = ctx.text.split()
    signal("start", key)
    try:
        await anyio.sleep(float(seconds))
    except anyio.get_cancelled_exc_class():
        signal("cancel", key)
        raise
    signal("done", key)


async def fanout_agent(ctx: RunContext) -> None:
    _, key, m, interval = ctx.text.split()
    signal("start", key)
    path = go_file(key)
    with anyio.fail_after(GO_TIMEOUT):
        while path is not None and not os.path.exists(path):
            await anyio.sleep(GO_POLL)
    n = int(m)
    for i in range(n):
        await ctx.artifact(f"fan {i} @T{time.monotonic():.9f}@", name="fan", append=i > 0,
                           last_chunk=i == n - 1)
        await anyio.sleep(float(interval))


async def event_agent(ctx: RunContext) -> str:
    _, key, seconds = ctx.text.split()
    try:
        for _ in range(10):
            await anyio.sleep(float(seconds) / 10)
    except anyio.get_cancelled_exc_class():
        signal("cancel", key)
        raise
    signal("done", key)
    return "re-engagement message written"


async def work_agent(ctx: RunContext) -> str:
    seconds = float(ctx.text.split()[1])
    ticks = max(1, round(seconds / 0.05))
    for i in range(ticks):
        await ctx.trajectory({"type": "tick", "step": i})
        await anyio.sleep(seconds / ticks)
    return f"worked {seconds:g}s"


async def chatter_agent(ctx: RunContext) -> str:
    _, statuses, steps = ctx.text.split()
    s, t = int(statuses), int(steps)
    for i in range(max(s, t)):
        if i < s:
            await ctx.working(f"step {i}")
        if i < t:
            await ctx.trajectory({"type": "tool_call", "tool": "search", "step": i})
    return "chatted"


async def hop_agent(ctx: RunContext) -> str | None:
    _, key, seconds, *urls = ctx.text.split()
    if not urls:
        await slow_agent(ctx)
        return None
    await ctx.call(urls[0], " ".join(["hop", key, seconds, *urls[1:]]))
    return "called"


AGENTS = {
    "echo": echo_agent,
    "stream": stream_agent,
    "slow": slow_agent,
    "fanout": fanout_agent,
    "event": event_agent,
    "work": work_agent,
    "hop": hop_agent,
    "chatter": chatter_agent,
}


async def ask_agent(ctx: RunContext) -> str:
    """``ask``: asks one question, answers with the answer (scenario 20, hand-over)."""
    return f"hi {await ctx.ask('your name?')}"


AGENTS["ask"] = ask_agent


async def bench_agent(ctx: RunContext) -> str | None:
    """Dispatch on the first word of the message (see the module docstring)."""
    command = ctx.text.split(" ", 1)[0]
    agent = AGENTS.get(command)
    if agent is None:
        raise ValueError(f"unknown benchmark command {command!r}")
    return await agent(ctx)
