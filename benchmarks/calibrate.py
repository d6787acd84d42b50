"""Cross-check the load generator against ``wrk`` on the bare ASGI apps.

    python -m benchmarks.calibrate [--seconds 4] [--rounds 2]

For each server, the bare ASGI app answers the same small JSON POST; ``wrk`` (C, one thread, 64
connections, a Lua script setting the body) and this package's generator (64 keep-alive
connections, one Python process) take turns driving it. If the two agree, the generator is not
what limits the figures of ``python -m benchmarks``. Needs ``wrk`` (``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .loadgen import Loop, RequestTemplate, connect_many
from .systems import BARE, ServerProcess, python_for_servers, server_env

CONNECTIONS = 64


def _wrk_script(directory: Path) -> Path:
    body = RequestTemplate(1, "SendMessage", "echo hello").make(1).split(b"\r\n\r\n", 1)[1]
    path = directory / "post.lua"
    path.write_text('wrk.method = "POST"\n'
                    f"wrk.body = '{body.decode()}'\n"
                    'wrk.headers["Content-Type"] = "application/json"\n'
                    'wrk.headers["A2A-Version"] = "1.0"\n')
    return path


async def _ours(port: int, seconds: float) -> tuple[float, float]:
    template = RequestTemplate(port, "SendMessage", "echo hello")
    conns = await connect_many(port, CONNECTIONS)
    loops = [Loop(c, template, lambda status, body: status == 200, seq_base=i * 10**8, port=port)
             for i, c in enumerate(conns)]
    try:
        start = time.perf_counter()
        cpu = time.process_time()
        await asyncio.gather(*(lp.start(start, start + seconds) for lp in loops))
        gen_cpu = (time.process_time() - cpu) / seconds
    finally:
        for lp in loops:
            lp.conn.close()
    return sum(len(lp.latencies) for lp in loops) / seconds, gen_cpu


async def main(seconds: float, rounds: int) -> int:
    wrk = shutil.which("wrk")
    if wrk is None:
        print("wrk is not installed: apt-get install wrk (Debian/Ubuntu)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="scoped-a2a-calibrate-"))
    script = _wrk_script(workdir)
    env = server_env(0, workdir)
    print(f"{'server':18} {'round':>5} {'wrk req/s':>10} {'ours req/s':>11} {'ours/wrk':>9} "
          f"{'generator CPU':>14}")
    for system in BARE:
        proc = ServerProcess(system, python_for_servers(), workdir, env, None)
        try:
            await proc.wait_ready()
            for r in range(rounds):
                out = subprocess.run(
                    [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{seconds:g}s", "-s", str(script),
                     proc.url], capture_output=True, text=True, timeout=seconds + 30).stdout
                m = re.search(r"Requests/sec:\s+([\d.]+)", out)
                theirs = float(m.group(1)) if m else float("nan")
                ours, cpu = await _ours(proc.port, seconds)
                print(f"{system.server:18} {r + 1:5} {theirs:10.0f} {ours:11.0f} "
                      f"{ours / theirs:9.2f} {cpu:14.2f}")
        finally:
            proc.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.seconds, a.rounds)))
