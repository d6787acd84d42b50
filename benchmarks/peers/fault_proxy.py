"""A scoped-a2a agent behind ``scoped_a2a.testing.FaultyProxy`` (scenarios 4 and 6).

One process: the benchmark agent served by hypercorn on a private port, and in front of it, on
``--port``, the fault proxy, which breaks the reads a follower makes (the trajectory extension's
cursor read, ``SubscribeToTask``):

- ``close``: every follower read has its connection closed without an answer;
- ``gone``: follower reads are answered while the task runs; once the task has ended the agent is
  "gone" for them and every read has its connection closed (the agent of the original incident,
  which went away after the turn);
- ``random`` (the soak): every task's follower reads start failing (connection closed) at a
  random moment between 0 and 0.6 s after its first read, mid-turn or after it; and any request
  at all (sends included) is, with probability ``--fault-rate``, closed at once, answered 500,
  or cut mid-answer.

Every follower read that hits a fault is reported on the side channel (``fault`` with a unique
key prefixed by the task id) with its time, so the generator can count the failed reads that
came after a turn ended, whichever client made them.
"""

from __future__ import annotations

import argparse
import itertools

import anyio

from benchmarks.sidechannel import signal
from scoped_a2a import RunPolicy
from scoped_a2a.agent_loading import load_agent
from scoped_a2a.testing import FOLLOWER_METHODS, faulty_agent

_seq = itertools.count()


def _report(method: str | None, task_id: str | None) -> None:
    if method in FOLLOWER_METHODS:
        signal("fault", f"{task_id}-{next(_seq)}")


async def main(args: argparse.Namespace) -> None:
    fault = None if args.fault == "none" else args.fault
    async with faulty_agent(load_agent(args.agent).agent, fault, port=args.port,
                            policy=RunPolicy.from_rules(args.detach_metadata),
                            fault_rate=args.fault_rate, seed=6, on_fault=_report):
        await anyio.sleep_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server", default="hypercorn-asyncio", choices=["hypercorn-asyncio",
                                                                     "hypercorn-trio"])
    p.add_argument("--agent", default="benchmarks.agents:bench_agent")
    p.add_argument("--fault", choices=["close", "gone", "random", "none"], default="close")
    p.add_argument("--fault-rate", type=float, default=0.05)
    p.add_argument("--detach-metadata", action="append", default=[])
    a = p.parse_args()
    anyio.run(main, a, backend=a.server.removeprefix("hypercorn-"))
