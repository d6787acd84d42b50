"""Scenario 14: the Redis store next to the memory store (send and stream, per server).

scoped-a2a runs twice on each server (hypercorn trio, hypercorn asyncio, uvicorn): with its
in-memory store, then with ``--store redis://127.0.0.1:PORT`` against a redis-server this
scenario starts on a free loopback port (no persistence: the figures are scoped-a2a's use of
Redis, not a disk's fsync). Each pair runs back to back, so the ratio redis/memory per server is
what to read. The send and stream figures come from scenarios 1 and 2's own measurements
(:class:`.send.Send`, :class:`.stream.Stream`), relabelled.

The Redis cost per request: the extra p50 of a blocking send at c=1 (no queueing), and the
Redis commands one send and one stream event cost, counted with ``INFO commandstats`` around a
run of sequential requests (commands Lua scripts issue are counted too; ``scripts`` counts the
script calls alone, each one round trip: the store sends its calls in batches, one script call
per batch, store/redis/batch.py, so under load a call carries many sends' and events' work).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from ..core import Bench, Metric, Scenario
from ..loadgen import RequestTemplate, connect
from ..systems import ServerProcess, System, free_port
from .send import Send
from .stream import EVENTS, Stream, one_stream, usable

SERVERS = ("hypercorn-trio", "hypercorn-asyncio", "uvicorn")
MEMORY, REDIS = "scoped-a2a memory", "scoped-a2a redis"


@dataclasses.dataclass(frozen=True)
class Counts:
    sends: int
    streams: int


def counts(quick: bool) -> Counts:
    """How many sequential sends and streams the command counts are taken over."""
    return Counts(sends=50, streams=2) if quick else Counts(sends=300, streams=10)


class RedisServer:
    """A redis-server on a free loopback port, its files in ``directory``; stopped by ``stop``."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory),
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--logfile", f"redis-{self.port}.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )

    async def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                if (await self.command(b"PING")).startswith(b"+PONG"):
                    return
            except OSError:
                pass
            await asyncio.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer within {timeout:.0f}s")

    async def command(self, inline: bytes) -> bytes:
        """One inline command on a fresh connection; the raw reply (a bulk string's body)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(inline + b"\r\n")
            head = await reader.readline()
            if head.startswith(b"$"):
                return (await reader.readexactly(int(head[1:]) + 2))[:-2]
            return head
        finally:
            writer.close()

    async def commandstats(self) -> dict[str, int]:
        """Calls per command so far (INFO itself left out)."""
        out: dict[str, int] = {}
        for line in (await self.command(b"INFO commandstats")).decode().splitlines():
            if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):
                name, rest = line.removeprefix("cmdstat_").split(":", 1)
                out[name] = int(rest.split(",", 1)[0].removeprefix("calls="))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class _Relabel:
    """What Send/Stream ``measure`` need of a Bench, keeping their figures for this scenario."""

    def __init__(self, bench: Bench, label: str, store: str, sizes: Any) -> None:
        self.bench = bench
        self.label = label
        self.store = store
        self.sizes = sizes
        self.figures: dict[str, float] = {}

    def record(self, system: object, backend: object, metric: str, value: float | None,
               unit: str, **_: object) -> None:
        if value is not None:
            self.figures[metric] = value

    def fail(self, text: str) -> None:
        self.bench.fail(f"{self.label}: {text}")

    def progress(self, text: str) -> None:
        self.bench.progress(f"{self.store:6} {text}")


def _sizes(bench: Bench) -> Any:
    """Scenario 1 and 2's sizes, trimmed: six servers run here, each once per store."""
    if bench.sizes.quick:
        return dataclasses.replace(bench.sizes, warmup=0.1, duration=0.5, stream_runs=5,
                                   stream_duration=0.5)
    return dataclasses.replace(bench.sizes, warmup=1.0, duration=4.0, stream_runs=20,
                               stream_duration=3.0)


class RedisStore(Scenario):
    name = "redis"
    number = 14
    title = "the Redis store next to the memory store (send c=64, stream c=16)"
    metrics = (
        Metric("rps_c64", "send req/s c=64", "req/s", "higher", True, "{:.0f}"),
        Metric("p50_c64", "send p50 ms c=64", "ms", "lower", True, "{:.2f}"),
        Metric("p99_c64", "send p99 ms c=64", "ms", "lower", True, "{:.2f}"),
        Metric("p50_c1", "send p50 ms c=1", "ms", "lower", True, "{:.2f}"),
        Metric("ttfe_p50", "first event p50 ms", "ms", "lower", True, "{:.2f}"),
        Metric("events_per_s_c16", "events/s c=16", "events/s", "higher", True, "{:.0f}"),
        Metric("extra_ms_c1", "Redis extra ms p50 c=1", "ms", None, False, "{:.2f}"),
        Metric("cmds_per_send", "Redis cmds/send", "commands", None, False, "{:.1f}"),
        Metric("scripts_per_send", "scripts/send", "calls", None, False, "{:.1f}"),
        Metric("cmds_per_event", "Redis cmds/stream event", "commands", None, False, "{:.1f}"),
        Metric("scripts_per_event", "scripts/stream event", "calls", None, False, "{:.2f}"),
    )
    notes = ("Both rows are scoped-a2a on the same server, run back to back; ratio lines read "
             "redis/memory (>1: Redis ahead). Redis runs on loopback without persistence; "
             "'cmds' counts every command Redis executed, those inside Lua scripts too, "
             "'scripts' the script calls (one round trip each; a call is a batch of the store's "
             "calls, so concurrent requests share them).")

    async def run(self, bench: Bench) -> None:
        redis = RedisServer(bench.workdir)
        try:
            await redis.wait_ready()
            for server in SERVERS:
                memory = await self.measure(bench, System("scoped", server), MEMORY, None)
                store = ("--store", redis.url)
                on_redis = await self.measure(bench, System("scoped", server, store), REDIS,
                                              redis)
                if "p50_c1" in memory and "p50_c1" in on_redis:
                    bench.record(REDIS, server, "extra_ms_c1",
                                 on_redis["p50_c1"] - memory["p50_c1"], "ms", role="subject")
        finally:
            redis.stop()

    async def measure(self, bench: Bench, system: System, label: str,
                      redis: RedisServer | None) -> dict[str, float]:
        """Send and stream figures of one system, recorded under ``label``; returned too."""
        relabel = _Relabel(bench, f"{label} / {system.server}", label.split()[-1],
                           _sizes(bench))
        role = "subject" if redis is not None else "ceiling"
        async with bench.servers([system]) as running:
            proc = running.get(system)
            if proc is None:
                return {}
            await Send().measure(relabel, system, proc)  # type: ignore[arg-type]
            await Stream().measure(relabel, system, proc)  # type: ignore[arg-type]
            if redis is not None:
                relabel.figures.update(await self.command_counts(bench, proc, redis))
        for metric in self.metrics:
            value = relabel.figures.get(metric.key)
            if value is not None:
                bench.record(label, system.server, metric.key, value, metric.unit, role=role)
        return relabel.figures

    async def command_counts(self, bench: Bench, proc: ServerProcess,
                             redis: RedisServer) -> dict[str, float]:
        """Redis commands (and script calls) per sequential send and per stream event."""
        n = counts(bench.sizes.quick)
        send = RequestTemplate(proc.port, "SendMessage", "echo hello")
        stream = RequestTemplate(proc.port, "SendStreamingMessage", f"stream {EVENTS}",
                                 stream=True)
        out: dict[str, float] = {}
        conn = await connect(proc.port)
        try:
            before = await redis.commandstats()
            for i in range(n.sends):
                conn = await usable(conn, proc.port)
                await conn.request(send.make(7 * 10**8 + i))
            _per(out, "send", n.sends, before, await redis.commandstats())
            before = await redis.commandstats()
            for i in range(n.streams):
                conn = await usable(conn, proc.port)
                res = await one_stream(conn, stream.make(8 * 10**8 + i))
                if res.artifacts != EVENTS:
                    bench.fail(f"{REDIS} / {proc.system.server}: a counted stream carried "
                               f"{res.artifacts} of {EVENTS} events")
            _per(out, "event", n.streams * EVENTS, before, await redis.commandstats())
        finally:
            conn.close()
        bench.progress(f"redis  {proc.system.server}: {out['cmds_per_send']:.1f} commands "
                       f"({out['scripts_per_send']:.1f} scripts) per send, "
                       f"{out['cmds_per_event']:.1f} ({out['scripts_per_event']:.2f}) per "
                       "stream event")
        return out


def _per(out: dict[str, float], what: str, n: int, before: dict[str, int],
         after: dict[str, int]) -> None:
    """Store the commands and script calls per ``what`` between two commandstats in ``out``."""
    diff = {k: v - before.get(k, 0) for k, v in after.items()}
    out[f"cmds_per_{what}"] = sum(diff.values()) / n
    out[f"scripts_per_{what}"] = (diff.get("evalsha", 0) + diff.get("eval", 0)) / n
