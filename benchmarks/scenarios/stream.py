"""Scenario 2: ``SendStreamingMessage`` of an agent that emits 100 small artifact chunks.

One caller at a time first: time to the first SSE event (the Task snapshot every server sends
first), time to the first of the agent's own events, and the stream's rate (100 events over the
stream's whole duration). Then 16 concurrent callers in closed loops: the agent events every
server delivers per second. The bare ASGI rows send a fixed 103-event stream, one ``send`` per
event: the ceiling of each server.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from .. import grpc_rows
from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import Conn, RequestTemplate, connect
from ..systems import BARE, FASTA2A, SCOPED, SDK, ServerProcess, System

EVENTS = 100
CONCURRENT = 16
ARTIFACT = b'"artifactUpdate"'
COMPLETED = b"TASK_STATE_COMPLETED"


@dataclass
class StreamResult:
    first: float | None = None
    first_artifact: float | None = None
    artifacts: int = 0
    completed: bool = False
    sent: float = 0.0
    ended: float = 0.0


async def one_stream(conn: Conn, raw: bytes, *, window: tuple[float, float] | None = None,
                     counter: list[int] | None = None, timeout: float = 30.0) -> StreamResult:
    """Run one stream on ``conn``; with ``counter``, count artifact events inside ``window``."""
    res = StreamResult()

    def on_event(data: bytes, t: float) -> None:
        if res.first is None:
            res.first = t
        if ARTIFACT in data:
            res.artifacts += 1
            if res.first_artifact is None:
                res.first_artifact = t
            if counter is not None and window is not None and window[0] <= t <= window[1]:
                counter[0] += 1
        elif COMPLETED in data:
            res.completed = True

    conn.on_event = on_event
    res.sent = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            await conn.request(raw)
    finally:
        conn.on_event = None
    res.ended = time.monotonic()
    return res


async def usable(conn: Conn, port: int) -> Conn:
    """``conn``, or a new connection if the server said it would close this one."""
    if conn.closed or conn.will_close:
        conn.close()
        return await connect(port)
    return conn


class Stream(Scenario):
    name = "stream"
    number = 2
    title = f"streaming (SendStreamingMessage, agent emits {EVENTS} small events)"
    metrics = (
        Metric("ttfe_p50", "first event p50 ms", "ms", "lower", True, "{:.2f}"),
        Metric("ttfe_p99", "first event p99 ms", "ms", "lower", False, "{:.2f}"),
        Metric("ttfa_p50", "first agent event p50 ms", "ms", "lower", False, "{:.2f}"),
        Metric("events_per_s_c1", "events/s c=1", "events/s", "higher", True, "{:.0f}"),
        Metric(f"events_per_s_c{CONCURRENT}", f"events/s c={CONCURRENT}", "events/s", "higher",
               True, "{:.0f}"),
        Metric(f"server_cpu_c{CONCURRENT}", f"server CPU c={CONCURRENT}", "cores", None, False,
               "{:.2f}"),
        Metric("cancel_p50", "cancelled call p50 ms", "ms", "lower", False, "{:.2f}"),
        Metric("cancel_p99", "cancelled call p99 ms", "ms", "lower", False, "{:.2f}"),
    )
    notes = (f"'{grpc_rows.SCOPED_ROW}' is scoped-a2a served with --grpc and "
             f"'{grpc_rows.SDK_ROW}' the a2a-sdk's grpc.aio server, both driven by one grpcio "
             "(grpc.aio) channel; 'cancelled call': from the client cancelling a streaming "
             "call (RST_STREAM) until its agent observes the cancellation "
             "(benchmarks/grpc_rows.py; scenario 3 times the same over HTTP/1.1).")

    def systems(self) -> list[System]:
        return [*BARE, *SCOPED, *SDK, *FASTA2A]

    async def run(self, bench: Bench) -> None:
        async with bench.servers(self.systems()) as running:
            for system, proc in running.items():
                await self.measure(bench, system, proc)
        await grpc_rows.stream_rows(bench, EVENTS, CONCURRENT)

    async def measure(self, bench: Bench, system: System, proc: ServerProcess) -> None:
        template = RequestTemplate(proc.port, "SendStreamingMessage", f"stream {EVENTS}",
                                   stream=True)
        sizes = bench.sizes
        results: list[StreamResult] = []
        conn = await connect(proc.port)
        try:
            for i in range(sizes.stream_runs + 1):
                conn = await usable(conn, proc.port)
                res = await one_stream(conn, template.make(i))
                if res.artifacts != EVENTS or not res.completed:
                    bench.fail(f"{system.label}: a stream carried {res.artifacts} of {EVENTS} "
                               f"events (completed: {res.completed})")
                    return
                if i:  # the first one warms up
                    results.append(res)
        finally:
            conn.close()
        ttfe = [(r.first or r.ended) - r.sent for r in results]
        ttfa = [(r.first_artifact or r.ended) - r.sent for r in results]
        rate = EVENTS * len(results) / sum(r.ended - r.sent for r in results)
        concurrent, cpu = await self.concurrent_cpu(proc, template, sizes.stream_duration)
        figures = {"ttfe_p50": percentile(ttfe, 50) * 1e3, "ttfe_p99": percentile(ttfe, 99) * 1e3,
                   "ttfa_p50": percentile(ttfa, 50) * 1e3, "events_per_s_c1": rate,
                   f"events_per_s_c{CONCURRENT}": concurrent,
                   f"server_cpu_c{CONCURRENT}": cpu}
        for metric, value in figures.items():
            bench.record(system, None, metric, value, "events/s" if "events" in metric else
                         "cores" if "cpu" in metric else "ms")
        bench.progress(f"{system.label:32} first event {figures['ttfe_p50']:6.2f} ms  "
                       f"{rate:7.0f} events/s (c=1)  {concurrent:7.0f} events/s (c={CONCURRENT})")

    async def concurrent(self, proc: ServerProcess, template: RequestTemplate,
                         duration: float) -> float:
        """Agent events delivered per second by CONCURRENT closed-loop callers."""
        return (await self.concurrent_cpu(proc, template, duration))[0]

    async def concurrent_cpu(self, proc: ServerProcess, template: RequestTemplate,
                             duration: float) -> tuple[float, float]:
        """Agent events delivered per second by CONCURRENT closed-loop callers, and the
        server process's CPU over the same window (cores)."""
        start = time.monotonic() + 0.2  # a short warm-up before the window opens
        window = (start, start + duration)
        counter = [0]
        cpu = [0.0]

        async def clock() -> None:
            await asyncio.sleep(max(0.0, window[0] - time.monotonic()))
            before = proc.cpu()
            await asyncio.sleep(max(0.0, window[1] - time.monotonic()))
            cpu[0] = (proc.cpu() - before) / duration

        async def caller(k: int) -> None:
            conn = await connect(proc.port)
            try:
                i = 0
                while time.monotonic() < window[1]:
                    conn = await usable(conn, proc.port)
                    i += 1
                    await one_stream(conn, template.make(k * 10**6 + i), window=window,
                                     counter=counter)
            finally:
                conn.close()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(clock())
            for k in range(CONCURRENT):
                tg.create_task(caller(k + 1))
        return counter[0] / duration, cpu[0]
