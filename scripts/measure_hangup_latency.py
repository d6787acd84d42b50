"""How long from a caller's hang-up to the agent seeing its cancellation, per backend.

    python scripts/measure_hangup_latency.py [--runs 200]

Serves an A2AApp through hypercorn in this process (one clock for both sides), opens a raw
connection, posts a blocking SendMessage, waits until the agent runs, closes the socket, and
records the time until the agent's CancelledError. Prints median and p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import anyio
import anyio.lowlevel

from scoped_a2a import A2AApp, RunContext, serve


async def measure(runs: int) -> list[float]:
    started = anyio.Event()
    seen: list[float] = []

    async def agent(ctx: RunContext) -> str:
        started.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            seen.append(time.perf_counter())
            raise
        return "unreachable"

    app = A2AApp(agent)
    shutdown = anyio.Event()
    latencies: list[float] = []
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}).encode()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            app, port=0, shutdown=shutdown, task_status=task_status))
        request = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
                   f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        for _ in range(runs):
            started = anyio.Event()
            before = len(seen)
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.send(request)
            with anyio.fail_after(5):
                await started.wait()
            hung_up = time.perf_counter()
            await stream.aclose()
            with anyio.fail_after(5):
                while len(seen) == before:
                    await anyio.lowlevel.checkpoint()
            latencies.append((seen[-1] - hung_up) * 1000)
        shutdown.set()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, {args.runs} hang-ups per backend")
    for backend in ("asyncio", "trio"):
        ms = sorted(anyio.run(measure, args.runs, backend=backend))
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        print(f"{backend:8s} median {statistics.median(ms):.2f} ms   p99 {p99:.2f} ms   "
              f"max {ms[-1]:.2f} ms")


if __name__ == "__main__":
    main()
