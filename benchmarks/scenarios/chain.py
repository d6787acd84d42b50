"""Scenario 8: a three-hop chain A -> B -> C; the caller hangs up at A: how long until C's agent
observes its cancellation?

Each hop is its own server process. A's and B's agents (``hop KEY SECONDS URL...``) call the next
hop with ``ctx.call``; C's agent signals ``start`` on the side channel and sleeps; when it is
cancelled it signals ``cancel`` stamped with the moment it saw it. The generator streams to A,
waits for C's ``start``, hangs up (closes the socket) and subtracts (CLOCK_MONOTONIC on both
sides). With scoped-a2a hops the hang-up travels as hang-ups (each hop's abandoned call is the
next hop's disconnect). Through an a2a-sdk B, which never cancels on disconnect, only the
CancelTask that A's ``ctx.call`` sends (shielded) stops B, and B's cancelled executor abandons its
stream to C. Every run must reach C: a run that is not cancelled is a failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import RequestTemplate, connect
from ..systems import ServerProcess, System, server_env

AGENT_SECONDS = 10
TRIO = System("scoped", "hypercorn-trio")
ASYNCIO = System("scoped", "hypercorn-asyncio")
SDK_UVICORN = System("sdk", "uvicorn")

CHAINS: dict[str, tuple[System, System, System]] = {
    "scoped-a2a x3": (TRIO, TRIO, TRIO),
    "scoped-a2a x3 ": (ASYNCIO, ASYNCIO, ASYNCIO),
    "scoped -> a2a-sdk -> scoped": (TRIO, SDK_UVICORN, TRIO),
}
"""Each chain by its row name (the server column names A's server; B's for the a2a-sdk hop)."""


class Chain(Scenario):
    name = "chain"
    number = 11
    title = "3-hop chain: caller hangs up at A, time until C's agent sees its cancellation"
    metrics = (
        Metric("p50", "p50 ms", "ms", "lower", True, "{:.2f}"),
        Metric("p99", "p99 ms", "ms", "lower", False, "{:.2f}"),
        Metric("cancelled", "cancelled", "fraction", None, False, "{:.0%}"),
    )
    notes = ("A and B call the next hop with ctx.call (scoped-a2a); the a2a-sdk B forwards with "
             "A2AClient. Through the a2a-sdk hop only A's shielded CancelTask stops B.")

    def systems(self) -> list[System]:
        return [TRIO, ASYNCIO, SDK_UVICORN]

    @asynccontextmanager
    async def chain(self, bench: Bench, hops: Sequence[System]
                    ) -> AsyncIterator[list[ServerProcess]]:
        """Start the hops' processes (one each, even for equal systems); always stop them."""
        env = server_env(bench.signal_port, bench.workdir)
        procs = [ServerProcess(s, bench.python, bench.workdir, env, None) for s in hops]
        try:
            await asyncio.gather(*(p.wait_ready() for p in procs))
            yield procs
        finally:
            await asyncio.gather(*(asyncio.to_thread(p.stop) for p in procs))

    async def run(self, bench: Bench) -> None:
        for n, (label, hops) in enumerate(CHAINS.items()):
            if not any(bench.wants(h.label) for h in hops):
                continue
            try:
                async with self.chain(bench, hops) as procs:
                    await self.measure(bench, label, procs, f"c{n}")
            except RuntimeError as exc:
                bench.fail(f"chain {label} did not start: {exc}")

    async def measure(self, bench: Bench, label: str, procs: list[ServerProcess],
                      prefix: str) -> None:
        runs, wait = bench.sizes.hangup_runs, max(bench.sizes.hangup_wait, 3.0)
        delays: list[float] = []
        misses = 0
        downstream = " ".join(p.url for p in procs[1:])
        for i in range(runs):
            key = f"{prefix}-{i}"
            raw = RequestTemplate(procs[0].port, "SendStreamingMessage",
                                  f"hop {key} {AGENT_SECONDS} {downstream}", stream=True).make(i)
            conn = await connect(procs[0].port)
            try:
                conn.send(raw, lambda status, body: None)
                if await bench.signals.wait("start", key, 10.0) is None:
                    bench.fail(f"{label}: C's agent never started")
                    return
                hung_up = time.monotonic()
            finally:
                conn.close()
            seen = await bench.signals.wait("cancel", key, wait)
            if seen is None:
                misses += 1
                if not delays and misses >= bench.sizes.give_up_cancel:
                    break
            else:
                delays.append(seen - hung_up)
        tried = len(delays) + misses
        name = label.strip()
        server = " / ".join(sorted({p.system.server for p in procs}))
        role = "subject" if all(p.system.is_subject for p in procs) else "peer"

        def record(metric: str, value: float | None, unit: str, note: str | None = None
                   ) -> None:
            bench.record(name, server, metric, value, unit, role=role, note=note)

        record("cancelled", len(delays) / tried, "fraction")
        if not delays:
            record("p50", None, "ms", "never")
            record("p99", None, "ms", "never")
        else:
            p50, p99 = percentile(delays, 50) * 1e3, percentile(delays, 99) * 1e3
            record("p50", p50, "ms")
            record("p99", p99, "ms")
            bench.progress(f"{name + ' / ' + server:44}: p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
                           f"cancelled {len(delays)}/{tried}")
        if misses:
            bench.fail(f"{label}: {misses} of {tried} runs were not cancelled at C within "
                       f"{wait:g}s of the hang-up at A")
