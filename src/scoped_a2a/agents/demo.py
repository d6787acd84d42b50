"""The built-in demo agent: no network, shows every feature, honours cancellation.

It "thinks" (trajectory events for a planning step and a tool call), then streams its reply word
by word as artifact chunks with small delays, the way a language model streams tokens, and returns
the whole reply. Special messages exercise the other paths:

- ``ask``: asks a question (input required) and echoes the answer;
- ``fail``: raises, so the task fails with a message;
- ``slow N``: works for N seconds (a long run to cancel or hang up on);
- anything else: an echo-style reply.

Every wait is a plain ``anyio.sleep``, so a cancelled run ends at its next chunk.
"""

from __future__ import annotations

import anyio

from ..runtime.context import RunContext

CHUNK_DELAY = 0.02
"""Seconds between streamed words (like a model's token rate)."""


async def demo_agent(ctx: RunContext) -> str | None:
    text = ctx.text.strip()
    await ctx.trajectory({"type": "plan", "input": text[:200]})
    if text == "fail":
        raise RuntimeError("the demo agent was asked to fail")
    if text == "ask":
        answer = await ctx.ask("What should I echo?")
        return f"You said: {answer}"
    if text.startswith("slow"):
        seconds = float(text.split()[1]) if len(text.split()) > 1 else 5.0
        await ctx.working(f"working for {seconds:g}s")
        steps = max(1, int(seconds / 0.1))
        for i in range(steps):
            await ctx.trajectory({"type": "tick", "step": i})
            await anyio.sleep(seconds / steps)
        return f"done after {seconds:g}s"
    await ctx.trajectory({"type": "tool_call", "tool": "echo", "args": {"text": text[:200]}})
    words = f"You said: {text}".split(" ")
    for i, word in enumerate(words):
        await anyio.sleep(CHUNK_DELAY)
        await ctx.artifact(
            word + (" " if i < len(words) - 1 else ""),
            name="reply",
            append=i > 0,
            last_chunk=i == len(words) - 1,
        )
    await ctx.trajectory({"type": "model_call", "tokens": len(words)})
    return " ".join(words)
