"""Scenario 5: N subscribers on one task; delivery latency, and the memory an idle stream costs.

A task is started without waiting (``returnImmediately``); its agent signals ``start`` and waits
for its go-file. N callers subscribe (``SubscribeToTask``), each on its own connection, and wait
for the Task snapshot every subscription begins with. The server's resident memory is read from
/proc before the subscriptions and again once all N are open and idle: the difference over N is
the cost of one idle open stream (server, HTTP stack and framework together). Then the go-file
appears and the agent emits its events 20 ms apart, each stamped with its emit time; delivery
latency is receipt minus stamp, over every subscriber and every event.

The bare ASGI rows (benchmarks/peers/bare_server.py) broadcast the same stamped events with no
framework: each subscription is one request coroutine waiting on a shared event. They are each
server's floor for an idle stream's memory and its ceiling for delivery.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import Conn, RequestTemplate, connect, connect_many, http_request, rpc_body
from ..systems import BARE, FASTA2A, SCOPED, SDK, ServerProcess, System

INTERVAL = 0.02
STAMP = b"@T"


def _metrics(sizes: tuple[int, ...]) -> tuple[Metric, ...]:
    out = []
    for n in sizes:
        out += [Metric(f"p50_n{n}", f"p50 ms N={n}", "ms", "lower", False, "{:.2f}"),
                Metric(f"p99_n{n}", f"p99 ms N={n}", "ms", "lower", True, "{:.2f}"),
                Metric(f"kib_per_stream_n{n}", f"KiB/stream N={n}", "KiB", "lower", n >= 100,
                       "{:.1f}")]
    return tuple(out)


class Fanout(Scenario):
    name = "fanout"
    number = 5
    title = "fan-out and idle cost (N subscribers on one task)"
    metrics = _metrics((10, 100, 1000))
    notes = ("KiB/stream: growth of the server's resident memory with N idle subscriptions "
             "open, divided by N (noisy at N=10).")

    def systems(self) -> list[System]:
        return [*SCOPED, *SDK, *FASTA2A, *BARE]

    async def run(self, bench: Bench) -> None:
        async with bench.servers(self.systems()) as running:
            for n_sys, (system, proc) in enumerate(running.items()):
                for n in bench.sizes.fanout_sizes:
                    await self.measure(bench, system, proc, n, f"f{n_sys}n{n}")

    async def measure(self, bench: Bench, system: System, proc: ServerProcess, n: int,
                      key: str) -> None:
        m = bench.sizes.fanout_events
        start = RequestTemplate(proc.port, "SendMessage", f"fanout {key} {m} {INTERVAL}",
                                return_immediately=True).make(0)
        async with await connect(proc.port) as conn:
            status, body = await conn.request(start)
        try:
            task_id = json.loads(body)["result"]["task"]["id"]
        except (ValueError, KeyError, TypeError):
            bench.fail(f"{system.label}: could not start the task ({status}: {body[:200]!r})")
            return
        if await bench.signals.wait("start", key, 10.0) is None:
            bench.fail(f"{system.label}: the fan-out agent never started")
            return
        await asyncio.sleep(0.2)
        rss_before = proc.rss()
        subscribe = http_request(proc.port, rpc_body("SubscribeToTask", {"id": task_id}),
                                 stream=True)
        conns = await connect_many(proc.port, n)
        latencies: list[float] = []
        counts = [0] * n
        firsts = [asyncio.get_running_loop().create_future() for _ in range(n)]
        ends = []
        try:
            for i, c in enumerate(conns):
                ends.append(_subscribe(c, subscribe, i, firsts[i], latencies, counts))
            async with asyncio.timeout(60):
                await asyncio.gather(*firsts)
            await asyncio.sleep(bench.sizes.idle_settle)  # let allocations settle
            rss_open = proc.rss()
            Path(bench.workdir, f"go-{key}").touch()
            async with asyncio.timeout(60 + m * INTERVAL):
                results = await asyncio.gather(*ends)
        finally:
            for c in conns:
                c.close()
        bad = sum(1 for status in results if status != 200)
        delivered = sum(counts)
        if bad or delivered != n * m:
            bench.fail(f"{system.label} N={n}: {delivered} of {n * m} events delivered "
                       f"({bad} subscriptions failed)")
        if not latencies:
            return
        p50, p99 = percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3
        kib = (rss_open - rss_before) / n / 1024
        bench.record(system, None, f"p50_n{n}", p50, "ms")
        bench.record(system, None, f"p99_n{n}", p99, "ms")
        bench.record(system, None, f"kib_per_stream_n{n}", kib, "KiB")
        bench.progress(f"{system.label:32} N={n:<5} delivery p50 {p50:7.2f} ms  p99 {p99:7.2f} ms"
                       f"  {kib:6.1f} KiB per idle stream  ({delivered}/{n * m} events)")


def _subscribe(conn: Conn, raw: bytes, i: int, first: asyncio.Future[None],
               latencies: list[float], counts: list[int]) -> asyncio.Future[int]:
    """Start one subscription; the returned future gives its HTTP status when it ends."""
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_event(data: bytes, t: float) -> None:
        if not first.done():
            first.set_result(None)
        at = data.find(STAMP)
        if at >= 0:
            stamp = float(data[at + 2 : data.index(b"@", at + 2)])
            latencies.append(t - stamp)
            counts[i] += 1

    def on_done(status: int, body: bytes) -> None:
        if not first.done():
            first.set_exception(RuntimeError(f"subscription ended early: {status} {body[:200]!r}"))
        if not done.done():
            done.set_result(status)

    conn.on_event = on_event
    conn.send(raw, on_done)
    return done

