"""Scenario 21: ``serve --workers 1`` beside ``--workers 2`` on Redis (send c=64, stream c=16),
then two replicas: the push takeover after a SIGKILL (:mod:`.push_takeover`) and the cost of a
handed-over follow-up (:class:`.handover.Handover`'s measurement).

scoped-a2a with ``--store redis://...`` against one redis-server (loopback, no persistence)
this scenario starts, on each hypercorn worker class, first as one process, then as
``--workers 2`` (a supervisor and two ``serve`` processes sharing the port with
``SO_REUSEPORT``, cli/workers.py). The send and stream figures are scenarios 1 and 2's own
measurements (:class:`.send.Send`, :class:`.stream.Stream`); the server CPU is summed over the
supervisor and its workers. On this machine the load generator and Redis share the same cores
as the workers, so read the ratio within one run, with the CPU each side used.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from ..core import Bench, Metric, Scenario
from ..systems import ServerProcess, System
from .handover import Handover
from .push_takeover import measure_push_takeover
from .redis_store import RedisServer, _Relabel, _sizes
from .send import Send
from .stream import Stream

SERVERS = ("hypercorn-asyncio", "hypercorn-trio")


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its living descendants."""
    total = 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return total
    return total + sum(tree_cpu(c) for c in children)


class _Tree:
    """A server process as Send/Stream see it, with the CPU of its whole process tree."""

    def __init__(self, proc: ServerProcess) -> None:
        self.proc = proc
        self.port = proc.port

    def cpu(self) -> float:
        return tree_cpu(self.proc.pid)


class Workers(Scenario):
    name = "workers"
    number = 21
    title = "serve --workers 1 and 2 on Redis (send c=64, stream c=16)"
    metrics = (
        Metric("rps_c64", "send req/s c=64", "req/s", "higher", True, "{:.0f}"),
        Metric("p50_c64", "send p50 ms c=64", "ms", "lower", True, "{:.2f}"),
        Metric("server_cpu_c64", "server CPU c=64 (all processes)", "cores", None, False,
               "{:.2f}"),
        Metric("generator_cpu_c64", "generator CPU c=64", "cores", None, False, "{:.2f}"),
        Metric("events_per_s_c16", "events/s c=16", "events/s", "higher", True, "{:.0f}"),
        # Two replicas (push_takeover.py, handover.py): rows of their own.
        Metric("push_all_s", "every due end pushed, s after SIGKILL", "s", "lower", False,
               "{:.2f}"),
        Metric("push_late_s", "last end pushed, s after its run ended", "s", "lower", False,
               "{:.2f}"),
        Metric("push_twice", "deliveries made twice", "", "lower", False, "{:.0f}"),
        Metric("p50", "handed-over answer p50 ms", "ms", "lower", False, "{:.2f}"),
        Metric("p99", "handed-over answer p99 ms", "ms", "lower", False, "{:.2f}"),
        Metric("cpu_ms", "CPU ms per answer (both replicas)", "ms", "lower", False, "{:.2f}"),
    )
    notes = ("Rows run back to back on one redis-server; ratio lines read workers 2 / workers 1 "
             "(>1: two workers ahead). The generator, Redis and the workers share 2 cores. "
             "Push takeover: replica A watches the push configs of 10-40 detached runs that "
             "replica B executes (slow 3 s) and is SIGKILLed once each pushed working; B adopts "
             "the watches after A's 2 s lease. Follow-ups: scenario 19's measurement (answer "
             "through the holder vs through the other replica), repeated in this run.")

    async def run(self, bench: Bench) -> None:
        redis = RedisServer(bench.workdir)
        try:
            await redis.wait_ready()
            for server in SERVERS:
                for n in (1, 2):
                    await self.measure(bench, server, n, redis)
            for server in SERVERS:
                await measure_push_takeover(bench, server, redis)
                await Handover().on(bench, server, ("--store", redis.url, "--redis-prefix",
                                                    f"wh-{server}"), "")
        finally:
            redis.stop()

    async def measure(self, bench: Bench, server: str, n: int, redis: RedisServer) -> None:
        label = f"scoped-a2a redis --workers {n}"
        options = ("--store", redis.url, "--redis-prefix", f"w{n}-{server}",
                   *(("--workers", str(n)) if n > 1 else ()))
        system = System("scoped", server, options)
        relabel = _Relabel(bench, f"{label} / {server}", f"w{n}", _sizes(bench))
        async with bench.servers([system]) as running:
            proc = running.get(system)
            if proc is None:
                return
            await asyncio.sleep(3 if n > 1 else 0)  # every worker listening, not the first
            tree: Any = _Tree(proc)
            await Send().measure(relabel, system, tree)  # type: ignore[arg-type]
            await Stream().measure(relabel, system, tree)  # type: ignore[arg-type]
        for metric in self.metrics:
            value = relabel.figures.get(metric.key)
            if value is not None:
                bench.record(label, server, metric.key, value, metric.unit,
                             role="subject" if n > 1 else "ceiling")
