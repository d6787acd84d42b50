"""Our layer alone: CPU per request of ``A2AApp`` driven directly, with no server stack.

    python -m benchmarks.inproc [--backend asyncio|trio] [--requests N] [--concurrency C]
        [--method SendMessage|SendStreamingMessage] [--observe off|metrics|tracing|console]
        [--gc default|tuned|off] [--profile]

The HTTP scenarios measure scoped-a2a with its server, where the server's own share (parsing,
socket writes) is most of the time and the machine's other load moves every figure. This calls
the ASGI app in-process with pre-built messages, so what it reports is the CPU scoped-a2a itself
spends per request (process time, not wall time: steadier on a shared machine), plus how many
objects each request leaves in reference cycles (which only the cyclic collector frees, at a cost
every request pays). ``--observe console`` serves the live console with one page's live feed
open (``/console/api/runs/stream``, read in-process). ``--profile`` prints cProfile's top
functions. Use it to compare a change
before and after; use the HTTP scenarios for figures to publish.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import pstats
import time
from typing import Any

import anyio

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.observe.base import Observer


async def echo(ctx: RunContext) -> str:
    return "echo"


def _body(method: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}).encode()


class _Bodies:
    """Request bodies, each with a message id of its own: a repeated one is a resend of the
    same send (docs/exactly-once.md), which answers with the first task instead of running."""

    def __init__(self, method: str) -> None:
        self._head, self._tail = _body(method).split(b'"m1"')
        self._n = 0

    def __call__(self) -> bytes:
        self._n += 1
        return self._head + b'"m' + str(self._n).encode() + b'"' + self._tail


_SCOPE = {"type": "http", "method": "POST", "path": "/", "root_path": "", "query_string": b"",
          "headers": [(b"content-type", b"application/json"), (b"a2a-version", b"1.0"),
                      (b"host", b"bench")]}


async def _one(app: A2AApp, body: bytes) -> None:
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    connected = anyio.Event()  # never set: the client stays for the whole request
    last: dict[str, Any] = {}

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await connected.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message.get("body"):
            last["body"] = message["body"]

    await app(_SCOPE, receive, send)
    if b"TASK_STATE_COMPLETED" not in last.get("body", b""):
        raise RuntimeError(f"unexpected answer: {last!r}")


def _observer(kind: str) -> Observer | None:
    if kind == "metrics":
        from scoped_a2a.observe.metrics import Metrics
        return Metrics()
    if kind == "tracing":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from scoped_a2a.observe.tracing import Tracing

        class Capped(InMemorySpanExporter):  # as the HTTP scenario's: memory stays flat
            def export(self, spans: Any) -> Any:
                result = super().export(spans)
                if len(self._finished_spans) > 10_000:
                    self.clear()
                return result

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Capped()))
        return Tracing(provider)
    return None


async def _console_page(app: A2AApp) -> None:
    """One open console page: its live feed, read until cancelled."""
    scope = {**_SCOPE, "method": "GET", "path": "/console/api/runs/stream", "headers": []}
    gone = anyio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    await app(scope, receive, send)


async def _run(args: argparse.Namespace) -> None:
    if args.observe == "console":
        from scoped_a2a.server.console import ConsoleSettings
        app = A2AApp(echo, console=ConsoleSettings())
    else:
        app = A2AApp(echo, observe=_observer(args.observe))
    body = _Bodies(args.method)
    async with app.running(), anyio.create_task_group() as pages:
        if args.observe == "console":
            pages.start_soon(_console_page, app)
        for _ in range(200):  # warm-up: lazily made objects, caches
            await _one(app, body())
        gc.collect()
        if args.gc == "tuned":
            # What ``serve`` does once started (server/gc_tuning.py).
            gc.collect()
            gc.freeze()
            gc.set_threshold(20_000, *gc.get_threshold()[1:])
        elif args.gc == "off":
            gc.disable()

        gc_was = gc.isenabled()
        gc.disable()
        for _ in range(100):
            await _one(app, body())
        cyclic = gc.collect() / 100
        if gc_was:
            gc.enable()

        async def caller(count: int) -> None:
            for _ in range(count):
                await _one(app, body())

        profile = cProfile.Profile() if args.profile else None
        started = time.process_time()
        if profile is not None:
            profile.enable()
        async with anyio.create_task_group() as tg:
            for _ in range(args.concurrency):
                tg.start_soon(caller, args.requests // args.concurrency)
        if profile is not None:
            profile.disable()
        cpu = time.process_time() - started
        pages.cancel_scope.cancel()
    done = args.requests // args.concurrency * args.concurrency
    print(f"{args.backend:8} {args.method:22} observe={args.observe:8} gc={args.gc:8} "
          f"{cpu / done * 1e6:7.1f} µs CPU/request  {cyclic:5.1f} objects in cycles/request")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--method", default="SendMessage",
                        choices=("SendMessage", "SendStreamingMessage"))
    parser.add_argument("--observe", default="off",
                        choices=("off", "metrics", "tracing", "console"))
    parser.add_argument("--gc", default="default", choices=("default", "tuned", "off"))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    anyio.run(_run, args, backend=args.backend)


if __name__ == "__main__":
    main()
