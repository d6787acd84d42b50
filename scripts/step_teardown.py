"""Measure how fast a step ends against an agent that closes every connection.

For each backend and each way a step ends (cancelled mid-turn, body raises after the turn, body
returns after the turn), run a step against the demo agent behind a proxy that closes every
trajectory-read connection without answering, and report how long the step took to end after the
cancel / raise / return, and how many reads failed after the turn ended (counted by the follower
and, independently, by the proxy).

    PYTHONPATH=src python scripts/step_teardown.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_client_misbehaving import run_step

from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.testing import faulty_agent


async def measure(ending: str, rounds: int) -> tuple[list[float], int, int]:
    took: list[float] = []
    worst_follower = worst_proxy = 0
    for _ in range(rounds):
        async with faulty_agent(demo_agent, "close") as (url, proxy, _app):
            times, step, _sink = await run_step(url, ending)
        took.append(times["end"] - times["t0"])
        follower = step.turns[0].follower
        assert follower is not None
        worst_follower = max(worst_follower, follower.failed_reads_after_stop)
        worst_proxy = max(worst_proxy, proxy.requests_after(times["turn_end"]))
    return took, worst_follower, worst_proxy


async def main(backend: str, rounds: int) -> None:
    for ending in ("cancelled", "raises", "returns"):
        took, by_follower, by_proxy = await measure(ending, rounds)
        print(f"{backend:8} {ending:9} ended after: median {statistics.median(took) * 1000:7.2f} ms"
              f"  max {max(took) * 1000:7.2f} ms | failed reads after the turn ended: "
              f"max {by_follower} (follower), {by_proxy} (agent side)")


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    print(f"Python {sys.version.split()[0]}, {rounds} rounds each; drain_timeout 1 s")
    for backend in ("asyncio", "trio"):
        anyio.run(main, backend, rounds, backend=backend)
