"""Agents for tests: each records what happened to it, so tests can assert on real behaviour."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import anyio

from scoped_a2a import RunContext


@dataclass
class Probe:
    """What a probe agent saw: starts, completions, cancellations (with monotonic times)."""

    started: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    cancelled: dict[str, float] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    running: int = 0
    started_event: anyio.Event = field(default_factory=anyio.Event)

    def agent(self, seconds: float = 0.5, steps: int = 10):  # type: ignore[no-untyped-def]
        """An agent that works ``seconds`` in ``steps`` steps, reporting each as an artifact."""

        async def probe_agent(ctx: RunContext) -> str:
            self.started[ctx.task_id] = time.monotonic()
            self.attempts[ctx.task_id] = ctx.attempt
            self.running += 1
            self.started_event.set()
            try:
                for i in range(steps):
                    await anyio.sleep(seconds / steps)
                    await ctx.artifact(f"step {i}", name="steps", append=i > 0,
                                       last_chunk=i == steps - 1)
                self.finished[ctx.task_id] = time.monotonic()
                return f"done: {ctx.text}"
            except anyio.get_cancelled_exc_class():
                self.cancelled[ctx.task_id] = time.monotonic()
                raise
            finally:
                self.running -= 1

        return probe_agent

    async def wait_started(self, n: int = 1, timeout: float = 5.0) -> None:
        with anyio.fail_after(timeout):
            while len(self.started) < n:
                await anyio.sleep(0.005)
