"""Scenario 19's cross-replica row: an event committed by replica A, delivered by replica B.

Two ``serve`` processes (hypercorn trio and asyncio) on one PostgreSQL database. A streaming
send to A starts the fan-out agent (benchmarks/agents.py), which waits for its go-file; ten
callers subscribe to the task on B (``SubscribeToTask``), then the go-file appears and the agent
emits its events 20 ms apart, each stamped with its emit time. Every event reaches B through
PostgreSQL: A's batched commit, its ``NOTIFY``, B's listener, B's read of the log. Delivery
latency is receipt on B minus the stamp (one clock: one machine), over every subscriber and
every event.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from ..core import Bench, percentile
from ..loadgen import RequestTemplate, connect, connect_many, http_request, rpc_body
from ..systems import System
from .fanout import INTERVAL, _subscribe

SUBSCRIBERS = 10


async def cross_replica(bench: Bench, url: str, events: int) -> tuple[float, float] | None:
    """p50 and p99 (ms) of delivery on replica B of what replica A's run emits."""
    a = System("scoped", "hypercorn-trio", ("--store", url))
    b = System("scoped", "hypercorn-asyncio", ("--store", url))
    async with bench.servers([a, b]) as running:
        pa, pb = running.get(a), running.get(b)
        if pa is None or pb is None:
            return None
        key = "xreplica"
        start = RequestTemplate(pa.port, "SendStreamingMessage",
                                f"fanout {key} {events} {INTERVAL}").make(0)
        conn = await connect(pa.port)
        first: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_event(data: bytes, t: float) -> None:
            if not first.done():
                try:
                    first.set_result(json.loads(data)["result"]["task"]["id"])
                except (ValueError, KeyError, TypeError):
                    first.set_exception(RuntimeError(f"no task in {data[:200]!r}"))

        ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        conn.on_event = on_event
        def on_end(status: int, body: bytes) -> None:
            if not ended.done():
                ended.set_result(status)

        conn.send(start, on_end)
        conns = []
        try:
            async with asyncio.timeout(30):
                task_id = await first
            subscribe = http_request(pb.port, rpc_body("SubscribeToTask", {"id": task_id}),
                                     stream=True)
            conns = await connect_many(pb.port, SUBSCRIBERS)
            latencies: list[float] = []
            counts = [0] * SUBSCRIBERS
            firsts = [asyncio.get_running_loop().create_future() for _ in conns]
            ends = [_subscribe(c, subscribe, i, firsts[i], latencies, counts)
                    for i, c in enumerate(conns)]
            async with asyncio.timeout(60):
                await asyncio.gather(*firsts)
            Path(bench.workdir, f"go-{key}").touch()
            async with asyncio.timeout(60 + events * INTERVAL):
                await asyncio.gather(*ends, ended)
        finally:
            conn.close()
            for c in conns:
                c.close()
        if sum(counts) != SUBSCRIBERS * events:
            bench.fail(f"cross-replica: {sum(counts)} of {SUBSCRIBERS * events} events "
                       "delivered on replica B")
        if not latencies:
            return None
        return percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3
