"""Scenario 3: a caller hangs up mid-run; how long until the agent observes its cancellation?

The agent (``slow KEY 5``) signals ``start`` on the side channel and sleeps; when it is cancelled
it signals ``cancel`` stamped with the moment it saw the cancellation. The generator waits for
``start``, hangs up (closes the socket) and subtracts. Both clocks are CLOCK_MONOTONIC, so the
difference is the real hang-up-to-cancel time across processes. Measured for a blocking
``SendMessage`` and for a ``SendStreamingMessage``.

A peer that never cancels on disconnect (the a2a-sdk and fasta2a cancel only on ``CancelTask``)
is tried three times (twice with ``--quick``), and reported as "never" when none of these runs
was cancelled within the wait; its agent then runs its five seconds to the end. For scoped-a2a
every run must be cancelled: a run that is not is a failure.
"""

from __future__ import annotations

import asyncio
import time

from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import RequestTemplate, connect
from ..systems import FASTA2A, SCOPED, SDK, ServerProcess, System

AGENT_SECONDS = 5


class Hangup(Scenario):
    name = "hangup"
    number = 3
    title = "hang-up to cancel (time until the agent observes its cancellation)"
    metrics = tuple(
        m
        for via in ("send", "stream")
        for m in (
            Metric(f"{via}_p50", f"{via} p50 ms", "ms", "lower", True, "{:.2f}"),
            Metric(f"{via}_p99", f"{via} p99 ms", "ms", "lower", False, "{:.2f}"),
            Metric(f"{via}_cancelled", f"{via} cancelled", "fraction", None, False, "{:.0%}"),
        )
    )
    notes = ("'never': no run was cancelled within the wait after its caller hung up; the agent "
             "ran on to its end. fasta2a's SendMessage does not wait for the agent, so only its "
             "stream can be hung up on.")

    def systems(self) -> list[System]:
        return [*SCOPED, *SDK, *FASTA2A]

    async def run(self, bench: Bench) -> None:
        async with bench.servers(self.systems()) as running:
            for n, (system, proc) in enumerate(running.items()):
                for via in ("send", "stream"):
                    if system.kind == "fasta2a" and via == "send":
                        bench.record(system, None, "send_p50", None, "ms", note="n/a")
                        continue
                    await self.measure(bench, system, proc, via, f"h{n}{via}")

    async def measure(self, bench: Bench, system: System, proc: ServerProcess, via: str,
                      prefix: str) -> None:
        method = "SendMessage" if via == "send" else "SendStreamingMessage"
        runs = bench.sizes.hangup_runs
        wait = bench.sizes.hangup_wait
        delays: list[float] = []
        misses = 0
        for i in range(runs):
            key = f"{prefix}-{i}"
            raw = RequestTemplate(proc.port, method, f"slow {key} {AGENT_SECONDS}",
                                  stream=via == "stream").make(i)
            conn = await connect(proc.port)
            try:
                conn.send(raw, lambda status, body: None)
                if await bench.signals.wait("start", key, 10.0) is None:
                    bench.fail(f"{system.label} {via}: the agent never started")
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
        bench.record(system, None, f"{via}_cancelled", len(delays) / tried, "fraction")
        if not delays:
            bench.record(system, None, f"{via}_p50", None, "ms", note="never")
            bench.record(system, None, f"{via}_p99", None, "ms", note="never")
            bench.progress(f"{system.label:32} {via:6}: never cancelled "
                           f"({misses} runs, waited {wait:g}s each)")
        else:
            p50, p99 = percentile(delays, 50) * 1e3, percentile(delays, 99) * 1e3
            bench.record(system, None, f"{via}_p50", p50, "ms")
            bench.record(system, None, f"{via}_p99", p99, "ms")
            bench.progress(f"{system.label:32} {via:6}: p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
                           f"cancelled {len(delays)}/{tried}")
        if system.is_subject and misses:
            bench.fail(f"{system.label} {via}: {misses} of {tried} runs were not cancelled "
                       f"within {wait:g}s of the hang-up")
        await asyncio.sleep(0)
