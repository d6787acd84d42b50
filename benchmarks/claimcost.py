"""The CPU a send's messageId claim costs, in-process: claims on and off, alternated.

    python -m benchmarks.claimcost [--backend asyncio|trio] [--batches N] [--batch M]

Two ``A2AApp``s in one process, the echo agent of :mod:`benchmarks.inproc` on each: one over the
memory store (every send claims its messageId), one over a memory store whose claim methods are
the ``TaskStore`` base class's no-ops (every send is new; the fingerprint is still taken). Batches
of blocking sends go to each in turn, so both see the same machine load (on a shared machine a
run of one after a run of the other measures the neighbours); the check's share of a send's CPU is
the median over the batch pairs of (on - off) / on. Run against itself (both apps with claims),
that figure came out within ±2.5 % on the 2-core machine shared with other work, so a share
below that is "too small to see" there. Then the check alone (fingerprint and claim, unique
ids), timed directly, best of a few runs: a lower bound, since it leaves out what claims cost
elsewhere (their memory, their bookkeeping when tasks are evicted). Prints one line:
``on US off US share FRACTION check US`` (µs of CPU per send: medians; the check alone).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import time

import anyio
import msgspec

from scoped_a2a import A2AApp
from scoped_a2a.protocol.types import Message
from scoped_a2a.server.resend import fingerprint
from scoped_a2a.store.base import TaskStore
from scoped_a2a.store.memory import MemoryTaskStore

from .inproc import _Bodies, _one, echo
from .peers.scoped_noclaims import CLAIM_METHODS


class NoClaimsStore(MemoryTaskStore):
    """The memory store keeping no message claims (the base class's methods, as the "claims
    off" peer of the resend scenario gives it)."""


for _name in CLAIM_METHODS:
    setattr(NoClaimsStore, _name, getattr(TaskStore, _name))


async def _batch(app: A2AApp, bodies: _Bodies, size: int, concurrency: int) -> float:
    """CPU µs per send of ``size`` sends, ``concurrency`` at a time."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await _one(app, bodies())

    gc.collect()  # untimed, and none during the batch: the heap both apps share grows, and a
    gc.disable()  # collection's cost would land on whichever batch triggered it
    try:
        started = time.process_time()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(caller, size // concurrency)
        return (time.process_time() - started) / (size // concurrency * concurrency) * 1e6
    finally:
        gc.enable()


async def _direct(n: int, repeats: int = 7) -> float:
    """µs per send of the check itself, timed alone: the message's fingerprint and its claim
    in a memory store (every id new, as in the throughput runs). Best of ``repeats`` runs of
    ``n``: the fastest run is the one the machine's other load disturbed least."""
    template = json.dumps({"messageId": "m-0", "role": "ROLE_USER", "parts": [{"text": "hello"}]})
    messages = [msgspec.json.decode(template.replace("m-0", f"m-{i}"), type=Message)
                for i in range(n)]
    best = float("inf")
    for _ in range(repeats):
        store = MemoryTaskStore()
        started = time.perf_counter()
        for i, msg in enumerate(messages):
            prior = await store.claim_message("anonymous", msg.message_id, fingerprint(msg),
                                              f"t-{i}")
            assert prior is None
        best = min(best, time.perf_counter() - started)
    return best / n * 1e6


async def _run(args: argparse.Namespace) -> None:
    on = A2AApp(echo, store=MemoryTaskStore())
    off = A2AApp(echo, store=NoClaimsStore())
    assert on.store.dedupes_sends and not off.store.dedupes_sends
    times: dict[str, list[float]] = {"on": [], "off": []}
    async with on.running(), off.running():
        pairs = [("on", on, _Bodies("SendMessage")), ("off", off, _Bodies("SendMessage"))]
        for _, app, bodies in pairs:  # warm-up
            await _batch(app, bodies, 400, args.concurrency)
        for n in range(args.batches):
            for name, app, bodies in pairs if n % 2 == 0 else pairs[::-1]:
                times[name].append(await _batch(app, bodies, args.batch, args.concurrency))
    direct = await _direct(args.batch)
    # Each batch pair ran back to back, under the same load: the median of their differences
    # is steadier than the difference of the medians.
    share = statistics.median((a - b) / a for a, b in zip(times["on"], times["off"], strict=True))
    print(f"on {statistics.median(times['on']):.1f} off {statistics.median(times['off']):.1f} "
          f"share {share:.4f} check {direct:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    anyio.run(_run, args, backend=args.backend)


if __name__ == "__main__":
    main()
