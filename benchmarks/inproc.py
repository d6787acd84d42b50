"""Our layer alone: CPU per request of ``A2AApp`` driven directly, with no server stack.

    python -m benchmarks.inproc [--backend asyncio|trio] [--requests N] [--concurrency C]
        [--method SendMessage|SendStreamingMessage] [--binding jsonrpc|rest]
        [--observe off|metrics|tracing|console] [--gc default|tuned|off] [--profile] [--parts]
    python -m benchmarks.inproc --compare OTHER_SRC [--rounds R] [--concurrency C ...]

The HTTP scenarios measure scoped-a2a with its server, where the server's own share (parsing,
socket writes) is most of the time and the machine's other load moves every figure. This calls
the ASGI app in-process with pre-built messages, so what it reports is the CPU scoped-a2a itself
spends per request (process time, not wall time: steadier on a shared machine), plus how many
objects each request leaves in reference cycles (which only the cyclic collector frees, at a cost
every request pays). ``--observe console`` serves the live console with one page's live feed
open (``/console/api/runs/stream``, read in-process). ``--profile`` prints cProfile's top
functions; ``--parts`` prints the CPU by part of the stack (binding, method layer, runner,
store, JSON, anyio's scopes and spawns, the event loop), from cProfile's own time per function,
scaled to the unprofiled CPU of the same run.

``--compare OTHER_SRC`` runs this benchmark on this checkout's ``src`` and on ``OTHER_SRC`` (the
``src`` directory of another checkout, e.g. ``/work/main/src``) in fresh processes, alternating
(``--rounds`` of each, the order swapped every round), and prints each side's median and the
ratio: on a machine other work loads, only a side-by-side ratio means much. Use it to compare a
change before and after; use the HTTP scenarios for figures to publish.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import os
import pstats
import re
import statistics
import subprocess
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import anyio

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.observe.base import Observer


async def echo(ctx: RunContext) -> str:
    return "echo"


def _body(method: str, binding: str = "jsonrpc") -> bytes:
    params = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}
    if binding == "rest":  # HTTP+JSON: the params are the body
        return json.dumps(params).encode()
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


class _Bodies:
    """Request bodies, each with a message id of its own: a repeated one is a resend of the
    same send (docs/exactly-once.md), which answers with the first task instead of running."""

    def __init__(self, method: str, binding: str = "jsonrpc") -> None:
        self._head, self._tail = _body(method, binding).split(b'"m1"')
        self._n = 0

    def __call__(self) -> bytes:
        self._n += 1
        return self._head + b'"m' + str(self._n).encode() + b'"' + self._tail


_SCOPE = {"type": "http", "method": "POST", "path": "/", "root_path": "", "query_string": b"",
          "headers": [(b"content-type", b"application/json"), (b"a2a-version", b"1.0"),
                      (b"host", b"bench")]}


_REST_PATHS = {"SendMessage": "/message:send", "SendStreamingMessage": "/message:stream"}


def _scope(method: str, binding: str) -> dict[str, Any]:
    """JSON-RPC: POST /; HTTP+JSON: POST to the method's route."""
    return _SCOPE if binding == "jsonrpc" else {**_SCOPE, "path": _REST_PATHS[method]}


_STAYS: list[anyio.Event] = []  # never set: the client stays for the whole request


async def _one(app: A2AApp, body: bytes, scope: dict[str, Any] = _SCOPE) -> None:
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    last: dict[str, Any] = {}

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        if not _STAYS:  # one for every request (the benchmark's own cost stays out of ours)
            _STAYS.append(anyio.Event())
        await _STAYS[0].wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message.get("body"):
            last["body"] = message["body"]

    await app(scope, receive, send)
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

    async def send(message: MutableMapping[str, Any]) -> None:
        pass

    await app(scope, receive, send)


async def _run(args: argparse.Namespace) -> None:
    if args.observe == "console":
        from scoped_a2a.server.console import ConsoleSettings
        app = A2AApp(echo, console=ConsoleSettings())
    else:
        app = A2AApp(echo, observe=_observer(args.observe))
    body = _Bodies(args.method, args.binding)
    scope = _scope(args.method, args.binding)
    async with app.running(), anyio.create_task_group() as pages:
        if args.observe == "console":
            pages.start_soon(_console_page, app)
        for _ in range(200):  # warm-up: lazily made objects, caches
            await _one(app, body(), scope)
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
            await _one(app, body(), scope)
        cyclic = gc.collect() / 100
        if gc_was:
            gc.enable()

        async def caller(count: int) -> None:
            for _ in range(count):
                await _one(app, body(), scope)

        async def load(profile: cProfile.Profile | None) -> float:
            started = time.process_time()
            if profile is not None:
                profile.enable()
            async with anyio.create_task_group() as tg:
                for _ in range(args.concurrency):
                    tg.start_soon(caller, args.requests // args.concurrency)
            if profile is not None:
                profile.disable()
            return time.process_time() - started

        profile = cProfile.Profile() if args.profile else None
        cpu = await load(profile)
        if args.parts:  # a second pass, profiled: its shares, scaled to the first's CPU
            profile = cProfile.Profile()
            await load(profile)
        pages.cancel_scope.cancel()
    done = args.requests // args.concurrency * args.concurrency
    print(f"{args.backend:8} {args.method:22} observe={args.observe:8} gc={args.gc:8} "
          f"{cpu / done * 1e6:7.1f} µs CPU/request  {cyclic:5.1f} objects in cycles/request")
    if profile is not None and args.profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if profile is not None and args.parts:
        print(_parts(pstats.Stats(profile), done, cpu / done))


# Which part of the stack a profiled function belongs to: the first pattern its file (or, for
# a built-in, its name) matches. Our own modules by package; then the libraries.
_PARTS = (
    ("binding (ASGI, JSON-RPC, body, answer writes)",
     r"scoped_a2a/server/(app|asgi|body|request_body|jsonrpc_binding|rest|rest_routes|dispatch|"
     r"disconnect|sse|closing|frames)\.py"),
    ("method layer (send set-up, resends, claims)",
     r"scoped_a2a/(server/(methods|send_setup|resend|end_lost)|store/claims|protocol/"
     r"(jsonrpc|dialect|ids|principal|deadline|on_disconnect|method))\.py"),
    ("runner (run, context, ending, outcome)", r"scoped_a2a/runtime/"),
    ("store (memory: log, snapshot, eviction)", r"scoped_a2a/store/"),
    ("JSON (msgspec encode/decode, structs)", r"msgspec|scoped_a2a/protocol/types\.py"),
    ("anyio: cancel scopes, spawns, events", r"anyio/|sniffio/|weakref"),
    ("event loop (asyncio / trio)",
     r"asyncio/|trio/|outcome/|_contextvars|get_running_loop|selectors|epoll|_asyncio"),
    ("logging", r"logging/"),
    ("the benchmark's own caller", r"benchmarks/"),
)
_OTHER = "other (builtins, contextlib, zlib, ...)"


def _parts(stats: pstats.Stats, requests: int, per_request: float) -> str:
    """CPU per request by part: each part's share of cProfile's own (``tottime``) time per
    function, times ``per_request`` (the unprofiled CPU per request)."""
    totals: dict[str, float] = {}
    for (path, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{path}:{name}"
        part = next((label for label, pattern in _PARTS if re.search(pattern, where)), _OTHER)
        totals[part] = totals.get(part, 0.0) + row[2]
    whole = sum(totals.values()) or 1.0
    lines = ["part (share of the profiled time; µs: that share of the unprofiled CPU)"]
    for label, _ in (*_PARTS, (_OTHER, "")):
        if label in totals:
            share = totals[label] / whole
            lines.append(f"  {label:50} {100 * share:5.1f} %  {share * per_request * 1e6:6.1f} µs")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("--binding", default="jsonrpc", choices=("jsonrpc", "rest"),
                        help="JSON-RPC (POST /) or HTTP+JSON (POST /message:send)")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--method", default="SendMessage",
                        choices=("SendMessage", "SendStreamingMessage"))
    parser.add_argument("--observe", default="off",
                        choices=("off", "metrics", "tracing", "console"))
    parser.add_argument("--gc", default="default", choices=("default", "tuned", "off"))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--parts", action="store_true",
                        help="print the CPU by part of the stack (cProfile)")
    parser.add_argument("--compare", metavar="OTHER_SRC",
                        help="also run OTHER_SRC (another checkout's src), alternating")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --compare: runs of each side")
    args = parser.parse_args()
    if args.compare:
        _compare(args)
        return
    logging.disable(logging.INFO)
    anyio.run(_run, args, backend=args.backend)



_RESULT = re.compile(r"([0-9.]+) µs CPU/request")


def _compare(args: argparse.Namespace) -> None:
    """Run this benchmark on this checkout's src and on ``args.compare``, alternating."""
    ours = str(Path(__file__).resolve().parent.parent / "src")
    other = str(Path(args.compare).resolve())
    root = str(Path(__file__).resolve().parent.parent)  # this benchmark, whichever src
    flags = ["--backend", args.backend, "--requests", str(args.requests), "--concurrency",
             str(args.concurrency), "--method", args.method, "--binding", args.binding,
             "--observe", args.observe, "--gc", args.gc]
    results: dict[str, list[float]] = {"this": [], "other": []}
    for round_ in range(args.rounds):
        sides = [("this", ours), ("other", other)]
        for side, src in sides if round_ % 2 == 0 else sides[::-1]:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, root])}
            out = subprocess.run([sys.executable, "-m", "benchmarks.inproc", *flags], env=env,
                                 capture_output=True, text=True, check=True).stdout
            match = _RESULT.search(out)
            if match is None:
                raise RuntimeError(f"no result in the output of {src}: {out[-500:]!r}")
            results[side].append(float(match.group(1)))
    this, that = statistics.median(results["this"]), statistics.median(results["other"])
    print(f"{args.backend:8} {args.method:22} c={args.concurrency:<3} "
          f"this {this:7.1f} µs  other {that:7.1f} µs  ratio {this / that:5.2f}   "
          f"(runs: this {', '.join(f'{x:.0f}' for x in results['this'])}; "
          f"other {', '.join(f'{x:.0f}' for x in results['other'])})")


if __name__ == "__main__":
    main()
