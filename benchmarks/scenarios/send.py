"""Scenario 1: blocking ``SendMessage`` to an echo agent at 1 and 64 concurrent callers.

Each caller is one keep-alive connection in a closed loop (the next request goes out when the
previous answer is in). After a warm-up, every answer that completes inside the measured window
is timed; requests/s is their count over the window. The bare ASGI rows are the ceiling of each
server; the CPU columns show who is saturated (the server process at ~100% of a core, the
generator well below it, or the generator is the bottleneck and the figure would be a lie).
"""

from __future__ import annotations

import asyncio
import time

from .. import grpc_rows
from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import Loop, RequestTemplate, connect, connect_many
from ..systems import BARE, SCOPED, SDK, ServerProcess, System

CONCURRENCY = (1, 64)
REST_ROW = "scoped-a2a HTTP+JSON"
"""The row name of scoped-a2a's REST binding (same server process as its JSON-RPC row)."""
MARK = b"TASK_STATE_COMPLETED"
SLOW_WINDOW = 3.0
"""Seconds of the second window, taken only when the first timed no answer at all."""


def check(status: int, body: bytes) -> bool:
    return status == 200 and MARK in body


class Send(Scenario):
    name = "send"
    number = 1
    title = "send throughput and latency (blocking SendMessage, echo agent)"
    metrics = (
        *(
            m
            for c in CONCURRENCY
            for m in (
                Metric(f"rps_c{c}", f"req/s c={c}", "req/s", "higher", True, "{:.0f}"),
                Metric(f"p50_c{c}", f"p50 ms c={c}", "ms", "lower", c == 64, "{:.2f}"),
                Metric(f"p99_c{c}", f"p99 ms c={c}", "ms", "lower", c == 64, "{:.2f}"),
            )
        ),
        Metric("server_cpu_c64", "server CPU c=64", "cores", None, False, "{:.2f}"),
        Metric("generator_cpu_c64", "generator CPU c=64", "cores", None, False, "{:.2f}"),
    )
    notes = ("fasta2a is left out: it answers SendMessage with a submitted task before its agent "
             "runs, so there is no blocking send to time (scenario 2 times its streams). "
             f"'{REST_ROW}' is the same scoped-a2a server answering POST /message:send "
             "(the HTTP+JSON binding) instead of a JSON-RPC SendMessage. "
             f"'{grpc_rows.SCOPED_ROW}' is scoped-a2a served with --grpc and "
             f"'{grpc_rows.SDK_ROW}' the a2a-sdk's grpc.aio server, both driven by one grpcio "
             "(grpc.aio) channel with c calls in flight (benchmarks/grpc_rows.py).")

    def systems(self) -> list[System]:
        return [*BARE, *SCOPED, *SDK]

    async def run(self, bench: Bench) -> None:
        async with bench.servers(self.systems()) as running:
            for system, proc in running.items():
                await self.run_one(bench, system, proc)
        await grpc_rows.send_rows(bench, CONCURRENCY)

    async def run_one(self, bench: Bench, system: System, proc: ServerProcess) -> None:
        await self.measure(bench, system, proc)
        if system.kind == "scoped":  # the HTTP+JSON binding of the same server, beside it
            await self.measure(bench, system, proc, rest=True)

    async def measure(self, bench: Bench, system: System, proc: ServerProcess, *,
                      rest: bool = False) -> None:
        template = RequestTemplate(proc.port, "SendMessage", "echo hello", rest=rest)
        label = f"{REST_ROW} / {system.server}" if rest else system.label
        row: System | str = REST_ROW if rest else system
        async with await connect(proc.port) as probe:
            status, body = await probe.request(template.make(0))
        if not check(status, body):
            bench.fail(f"{label} answered {status}: {body[:300]!r}")
            return
        sizes = bench.sizes
        for level, c in enumerate(CONCURRENCY):
            conns = await connect_many(proc.port, c)
            # Ids of their own at each level: a repeated messageId is a resend of the first
            # send (docs/exactly-once.md), answered with its task instead of a new run.
            loops = [Loop(conn, template, check, seq_base=(level * 100 + i + 1) * 10**7,
                          port=proc.port)
                     for i, conn in enumerate(conns)]
            try:
                await _drive(loops, sizes.warmup, record=False)
                for duration in (sizes.duration, max(sizes.duration, SLOW_WINDOW)):
                    for lp in loops:
                        lp.latencies.clear()
                    cpu_srv, cpu_gen = proc.cpu(), time.process_time()
                    window = await _drive(loops, duration, record=True)
                    srv = (proc.cpu() - cpu_srv) / window
                    gen = (time.process_time() - cpu_gen) / window
                    # A slow server at c=64 (hundreds of ms an answer, more on a loaded
                    # machine) can finish no answer inside --quick's short window: measure
                    # it again over a window longer than one answer instead of failing.
                    if any(lp.latencies for lp in loops):
                        break
            finally:
                for lp in loops:
                    lp.conn.close()
            latencies = [x for lp in loops for x in lp.latencies]
            errors = sum(lp.errors for lp in loops)
            if not latencies:
                bench.fail(f"{label} c={c}: no answer completed")
                continue
            if errors:
                bench.fail(f"{label} c={c}: {errors} wrong answers")
            rps = len(latencies) / window
            p50, p99 = percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3
            role = "control" if rest else None  # listed beside the subject, not in ratios
            bench.record(row, system.server, f"rps_c{c}", rps, "req/s", role=role)
            bench.record(row, system.server, f"p50_c{c}", p50, "ms", role=role)
            bench.record(row, system.server, f"p99_c{c}", p99, "ms", role=role)
            if c == 64:
                bench.record(row, system.server, "server_cpu_c64", srv, "cores", role=role)
                bench.record(row, system.server, "generator_cpu_c64", gen, "cores", role=role)
            bench.progress(f"{label:32} c={c:<3} {rps:7.0f} req/s  p50 {p50:6.2f} ms  "
                           f"p99 {p99:6.2f} ms  server CPU {srv:.2f}  generator CPU {gen:.2f}")


async def _drive(loops: list[Loop], duration: float, *, record: bool) -> float:
    """Run every loop for ``duration`` seconds; return the measured window's length."""
    start = time.perf_counter()
    stop = start + duration
    futures = [lp.start(start if record else stop + 3600, stop) for lp in loops]
    async with asyncio.timeout(duration + 60):
        await asyncio.gather(*futures)
    return duration

