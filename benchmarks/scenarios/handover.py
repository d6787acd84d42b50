"""Scenario 19: the cost of a follow-up handed to the replica holding its run (Redis).

Two scoped-a2a replicas (hypercorn asyncio, then hypercorn trio) share one redis-server
(loopback, no persistence). One caller, sequentially: ``ask`` to replica A (its run parks in
``ctx.ask`` on A), then the answer, alternately through A itself (the holder) and through B
(handed over: B publishes it, A delivers it and replies, B's caller follows the shared log).
The latency of the answer (send to completed) is recorded per route, p50 and p99, with the
CPU seconds each replica used, so the ratio handed/holder is read within one run.
"""

from __future__ import annotations

import json
import time

from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import connect, http_request, message_params, rpc_body
from ..systems import ServerProcess, System
from .redis_store import RedisServer

SERVERS = ("hypercorn-asyncio", "hypercorn-trio")
HOLDER, HANDED = "answer via the holder", "answer via the other replica"


class Handover(Scenario):
    name = "handover"
    number = 20
    title = "a follow-up handed over to the replica holding its run (Redis, c=1)"
    metrics = (
        Metric("p50", "answer p50 ms", "ms", "lower", True, "{:.2f}"),
        Metric("p99", "answer p99 ms", "ms", "lower", True, "{:.2f}"),
        Metric("cpu_ms", "CPU ms per answer (both replicas)", "ms", "lower", True, "{:.2f}"),
    )
    notes = ("One caller: ask on replica A, then the answer through A (holder) or through B "
             "(handed over through Redis pub/sub), alternated; both rows share the servers.")

    async def run(self, bench: Bench) -> None:
        redis = RedisServer(bench.workdir)
        try:
            await redis.wait_ready()
            for server in SERVERS:
                await self.on(bench, server, redis, f"h-{server}")
        finally:
            redis.stop()

    async def on(self, bench: Bench, server: str, redis: RedisServer, prefix: str) -> None:
        """Start the two replicas over ``redis`` (keys under ``prefix``) and measure."""
        store = ("--store", redis.url, "--redis-prefix", prefix)
        a = System("scoped", server, store)
        b = System("scoped", server, (*store, "--no-worker"))
        async with bench.servers([a, b]) as running:
            if a in running and b in running:
                await self.measure(bench, server, running[a], running[b])

    async def measure(self, bench: Bench, server: str, a: ServerProcess,
                      b: ServerProcess) -> None:
        n = 40 if bench.sizes.quick else 400
        times: dict[str, list[float]] = {HOLDER: [], HANDED: []}
        cpu: dict[str, float] = {HOLDER: 0.0, HANDED: 0.0}
        async with await connect(a.port) as on_a, await connect(b.port) as on_b:
            for i in range(n + 10):
                status, body = await on_a.request(http_request(
                    a.port, rpc_body("SendMessage", message_params("ask"))))
                task = json.loads(body)["result"]["task"]
                route = HANDED if i % 2 else HOLDER
                conn, port = (on_b, b.port) if route == HANDED else (on_a, a.port)
                params = message_params("bench")
                params["message"].update(taskId=task["id"], contextId=task["contextId"])
                request = http_request(port, rpc_body("SendMessage", params))
                cpu0 = a.cpu() + b.cpu()
                start = time.perf_counter()
                status, body = await conn.request(request)
                elapsed = time.perf_counter() - start
                used = a.cpu() + b.cpu() - cpu0
                state = json.loads(body).get("result", {}).get("task", {}).get("status", {})
                if status != 200 or state.get("state") != "TASK_STATE_COMPLETED":
                    bench.fail(f"{server}: {route}: {status} {body[:200]!r}")
                    return
                if i >= 10:  # the first ones warm up both replicas
                    times[route].append(elapsed * 1000)
                    cpu[route] += used
        for route, values in times.items():
            bench.record(route, server, "p50", percentile(values, 50), "ms",
                         role="subject" if route == HANDED else "ceiling")
            bench.record(route, server, "p99", percentile(values, 99), "ms",
                         role="subject" if route == HANDED else "ceiling")
            bench.record(route, server, "cpu_ms", cpu[route] * 1000 / len(values), "ms",
                         role="subject" if route == HANDED else "ceiling")
        bench.progress(f"{server}: holder p50 {percentile(times[HOLDER], 50):.2f} ms, "
                       f"handed p50 {percentile(times[HANDED], 50):.2f} ms")
