"""Two or more checkouts of scoped-a2a side by side on one PostgreSQL, driven in turn.

    python -m benchmarks.pg_side_by_side [--servers trio,asyncio,uvicorn] [--rounds 2]
        [--dur 4] [--only stream|send] [--memory] [--c1] CHECKOUT...

Each checkout's server (``serve --store postgresql://...`` on hypercorn trio or asyncio, or
``benchmarks.peers.scoped_uvicorn``) gets its own database of one PostgreSQL this starts
(tests/postgres/server.py, ``fsync=on``); ``--memory`` adds the last checkout with its memory
store. Each round drives every server in turn, in the order given: 16 closed-loop streams of
``stream 100`` (events/s), then 64 blocking senders (``--senders``) of ``echo hello``
(sends/s; ``--c1``: then one sender, its p50), and reads the
CPU of the server process and of the postmaster's process tree (backends, WAL writer, ...)
from /proc over each window: per event and per send. Servers taking turns see the same
machine load, so on a shared machine the CPU columns compare where the rates cannot. Run it
from a checkout (its ``benchmarks`` and ``tests`` packages drive the load); servers run with
``/work/main/.venv-313``'s Python unless ``--python``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from .loadgen import Loop, RequestTemplate, connect, connect_many
from .scenarios.send import check
from .scenarios.stream import one_stream, usable
from .systems import free_port

PY = ["/work/main/.venv-313/bin/python"]
TCK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int, children: bool = False) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    t = int(fields[11]) + int(fields[12])
    if children:
        t += int(fields[13]) + int(fields[14])
    return t / TCK


def pg_cpu(master: int) -> float:
    """CPU of the postmaster (with reaped children) and its live children."""
    total = cpu_of(master, True)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:
            total += (int(fields[11]) + int(fields[12])) / TCK
    return total


class Server:
    def __init__(self, tree: str, kind: str, url: str | None, key: str) -> None:
        self.tree, self.kind = tree, kind
        self.port = free_port()
        store = ["--store", url] if url else []
        agent = "benchmarks.agents:bench_agent"
        if kind == "uvicorn":
            argv = [PY[0], "-m", "benchmarks.peers.scoped_uvicorn", "--port", str(self.port),
                    "--server", "uvicorn", "--agent", agent, *store]
        else:
            argv = [PY[0], "-m", "scoped_a2a", "serve", "--agent", agent, "--backend", kind,
                    "--port", str(self.port), "--grace", "1", "--log-level", "WARNING", *store]
        env = dict(os.environ, PYTHONPATH=f"{tree}/src:{tree}",
                   SCOPED_A2A_POSTGRES_KEY_FILE=key, PYTHONUNBUFFERED="1")
        self.log = open(os.devnull, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    async def ready(self) -> None:
        for _ in range(300):
            try:
                c = await connect(self.port, timeout=1)
                c.close()
                return
            except OSError:
                await asyncio.sleep(0.1)
        raise RuntimeError("not ready")

    def cpu(self) -> float:
        return cpu_of(self.proc.pid)

    def stop(self) -> None:
        self.log.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def streams(srv: Server, master: int, dur: float) -> tuple[float, float, float]:
    template = RequestTemplate(srv.port, "SendStreamingMessage", "stream 100", stream=True)
    start = time.monotonic() + 0.5
    window = (start, start + dur)
    counter = [0]
    cpu: list[float] = [0, 0]

    async def clock() -> None:
        await asyncio.sleep(max(0.0, window[0] - time.monotonic()))
        s, p = srv.cpu(), pg_cpu(master)
        await asyncio.sleep(max(0.0, window[1] - time.monotonic()))
        cpu[0], cpu[1] = srv.cpu() - s, pg_cpu(master) - p

    async def caller(k: int) -> None:
        conn = await connect(srv.port)
        try:
            i = 0
            while time.monotonic() < window[1]:
                conn = await usable(conn, srv.port)
                i += 1
                await one_stream(conn, template.make(k * 10**6 + i),
                                 window=window, counter=counter)
        finally:
            conn.close()

    async with asyncio.TaskGroup() as tg:
        tg.create_task(clock())
        for k in range(16):
            tg.create_task(caller(k + 1))
    n = max(counter[0], 1)
    return counter[0] / dur, cpu[0] / n * 1e6, cpu[1] / n * 1e6


async def sends(srv: Server, master: int, dur: float, base: int, callers: int = 64
                ) -> tuple[float, float, float]:
    template = RequestTemplate(srv.port, "SendMessage", "echo hello")
    conns = await connect_many(srv.port, callers)
    loops = [Loop(c, template, check, seq_base=(base * 100 + i + 1) * 10**6, port=srv.port)
             for i, c in enumerate(conns)]
    t0 = time.perf_counter()
    warm = t0 + 0.5
    stop = warm + dur
    futs = [lp.start(warm, stop) for lp in loops]
    await asyncio.sleep(0.5)
    s, p = srv.cpu(), pg_cpu(master)
    await asyncio.gather(*futs)
    cs, cp = srv.cpu() - s, pg_cpu(master) - p
    for lp in loops:
        lp.conn.close()
    n = sum(len(lp.latencies) for lp in loops)
    errs = sum(lp.errors for lp in loops)
    if errs:
        print("ERRORS", errs, file=sys.stderr)
    if callers == 1:  # the median latency (ms) in place of the rate
        return statistics.median(loops[0].latencies) * 1e3, cs / n * 1e6, cp / n * 1e6
    return n / dur, cs / n * 1e6, cp / n * 1e6


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _postmaster(wrapper: int) -> int:
    """The postmaster's pid: ``runuser`` (tests/postgres/server.py, as root) is its parent."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if parent == wrapper:
                return int(d)
    return wrapper


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="trio,asyncio,uvicorn")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dur", type=float, default=4.0)
    ap.add_argument("--only", default="", choices=["", "stream", "send"])
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--c1", action="store_true", help="also one blocking sender: send p50")
    ap.add_argument("--senders", type=int, default=64, help="blocking senders at once")
    ap.add_argument("--python", default=PY[0])
    ap.add_argument("trees", nargs="+")
    a = ap.parse_args()
    PY[0] = a.python
    from tests.postgres.server import new_server

    pg = await asyncio.to_thread(new_server)
    assert pg.proc is not None
    master = _postmaster(pg.proc.pid)
    key = os.path.join(pg.directory, "push.key")
    print(f"# {time.strftime('%H:%M:%S')} load {_load()}", flush=True)
    seq = 0
    everyone: list[Server] = []
    try:
        for kind in a.servers.split(","):
            runs: list[tuple[Server, str]] = []
            for tree in a.trees:
                url = await asyncio.to_thread(pg.database)
                runs.append((Server(tree, kind, url, key), tree.rstrip("/").split("/")[-1]))
            if a.memory:
                runs.append((Server(a.trees[-1], kind, None, key), "memory"))
            everyone = [s for s, _ in runs]
            for s in everyone:
                await s.ready()
            for s in everyone:  # warm-up: connections opened, statements prepared
                await streams(s, master, 2.0)
            for r in range(a.rounds):
                for s, name in runs:
                    if a.only != "send":
                        ev, cs, cp = await streams(s, master, a.dur)
                        print(f"{kind:8} r{r} {name:8} stream {ev:7.0f} ev/s  server "
                              f"{cs:5.1f} us/ev  pg {cp:5.1f} us/ev", flush=True)
                    if a.only != "stream":
                        seq += 1
                        rps, cs, cp = await sends(s, master, a.dur, seq, a.senders)
                        print(f"{kind:8} r{r} {name:8} send   {rps:7.0f} /s    server "
                              f"{cs:6.0f} us/send pg {cp:6.0f} us/send", flush=True)
                    if a.c1:
                        seq += 1
                        p50, cs, cp = await sends(s, master, a.dur, seq, callers=1)
                        print(f"{kind:8} r{r} {name:8} send c=1 p50 {p50:5.2f} ms  server "
                              f"{cs:6.0f} us/send pg {cp:6.0f} us/send", flush=True)
            for s in everyone:
                s.stop()
    finally:
        for s in everyone:
            s.stop()
        print(f"# {time.strftime('%H:%M:%S')} load {_load()}", flush=True)
        await asyncio.to_thread(pg.destroy)


if __name__ == "__main__":
    asyncio.run(main())
