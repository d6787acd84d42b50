"""Scenario 20: the cost of a follow-up handed to the replica holding its run (Redis, PostgreSQL).

Two scoped-a2a replicas (hypercorn asyncio, then hypercorn trio) share one store: a
redis-server (loopback, no persistence), then a PostgreSQL database (loopback, ``fsync=on``,
the tests' launcher). One caller, sequentially: ``ask`` to replica A (its run parks in
``ctx.ask`` on A), then the answer, alternately through A itself (the holder) and through B
(handed over: B publishes it, by Redis pub/sub or PostgreSQL's ``NOTIFY``, A delivers it and
replies, B's caller follows the shared log). The latency of the answer (send to completed) is
recorded per route, p50 and p99, with the CPU seconds each replica used, so the ratio
handed/holder is read within one run, per store.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping
from typing import ClassVar

from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import connect, http_request, message_params, rpc_body
from ..systems import ServerProcess, System
from .redis_store import RedisServer

SERVERS = ("hypercorn-asyncio", "hypercorn-trio")
HOLDER, HANDED = "answer via the holder", "answer via the other replica"
PG = " (PostgreSQL)"
"""Appended to the routes' labels for the PostgreSQL rows (the Redis rows keep theirs)."""


class Handover(Scenario):
    name = "handover"
    number = 20
    title = "a follow-up handed over to the replica holding its run (Redis, PostgreSQL; c=1)"
    metrics = (
        Metric("p50", "answer p50 ms", "ms", "lower", True, "{:.2f}"),
        Metric("p99", "answer p99 ms", "ms", "lower", True, "{:.2f}"),
        Metric("cpu_ms", "CPU ms per answer (both replicas)", "ms", "lower", True, "{:.2f}"),
    )
    # Each store's rows against its own holder's.
    pairs: ClassVar[Mapping[str, str]] = {HOLDER: HANDED, HOLDER + PG: HANDED + PG}
    notes = ("One caller: ask on replica A, then the answer through A (holder) or through B "
             "(handed over through Redis pub/sub, or PostgreSQL's NOTIFY), alternated; both "
             "rows of a store share the servers.")

    async def run(self, bench: Bench) -> None:
        redis = RedisServer(bench.workdir)
        try:
            await redis.wait_ready()
            for server in SERVERS:
                await self.on(bench, server, ("--store", redis.url, "--redis-prefix",
                                              f"h-{server}"), "")
        finally:
            redis.stop()
        await self.on_postgres(bench)

    async def on_postgres(self, bench: Bench) -> None:
        """The same over one PostgreSQL database per server (both replicas share its key)."""
        from tests.postgres.server import bin_dir, new_server

        if bin_dir() is None:
            bench.fail(f"handover{PG}: PostgreSQL is not installed (scripts/install-system-deps)")
            return
        server = await asyncio.to_thread(new_server)
        os.environ["SCOPED_A2A_POSTGRES_KEY_FILE"] = str(bench.workdir / "handover-pg.key")
        try:
            for name in SERVERS:
                url = await asyncio.to_thread(server.database)
                await self.on(bench, name, ("--store", url), PG)
        finally:
            os.environ.pop("SCOPED_A2A_POSTGRES_KEY_FILE", None)
            await asyncio.to_thread(server.destroy)

    async def on(self, bench: Bench, server: str, store: tuple[str, ...], suffix: str) -> None:
        """Start the two replicas over one ``store`` and measure (row labels + ``suffix``)."""
        a = System("scoped", server, store)
        b = System("scoped", server, (*store, "--no-worker"))
        async with bench.servers([a, b]) as running:
            if a in running and b in running:
                await self.measure(bench, server, running[a], running[b], suffix)

    async def measure(self, bench: Bench, server: str, a: ServerProcess,
                      b: ServerProcess, suffix: str) -> None:
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
                    bench.fail(f"{server}: {route}{suffix}: {status} {body[:200]!r}")
                    return
                if i >= 10:  # the first ones warm up both replicas
                    times[route].append(elapsed * 1000)
                    cpu[route] += used
        for route, values in times.items():
            role = "subject" if route == HANDED else "ceiling"
            label = route + suffix
            bench.record(label, server, "p50", percentile(values, 50), "ms", role=role)
            bench.record(label, server, "p99", percentile(values, 99), "ms", role=role)
            bench.record(label, server, "cpu_ms", cpu[route] * 1000 / len(values), "ms",
                         role=role)
        bench.progress(f"{server}{suffix}: holder p50 {percentile(times[HOLDER], 50):.2f} ms, "
                       f"handed p50 {percentile(times[HANDED], 50):.2f} ms")
