"""Observability: one OpenTelemetry trace across three hops, Prometheus metrics, JSON logs.

Traces use the real OpenTelemetry SDK with its in-memory exporter; metrics are scraped over HTTP
and read with ``prometheus_client.parser``; the CLI's ``--log-format json --metrics`` runs as a
real ``python -m scoped_a2a serve`` subprocess.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from scoped_a2a import A2AApp, A2AClient, RunContext, Task, TaskState
from scoped_a2a.observe.logs import JsonFormatter
from scoped_a2a.observe.metrics import Metrics
from scoped_a2a.observe.tracing import Tracing

from .helpers import free_port, rpc, served, text_message

pytestmark = pytest.mark.anyio

_EXPORTER = InMemorySpanExporter()


def _provider() -> TracerProvider:
    """The global SDK provider (set once per process), exporting to ``_EXPORTER``."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    if not getattr(current, "_scoped_a2a_test", False):
        current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        current._scoped_a2a_test = True  # type: ignore[attr-defined]
    return current


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _provider()
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _by_id(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans}


async def test_one_trace_across_three_hops(spans: InMemorySpanExporter) -> None:
    urls: dict[str, str] = {}

    def forwarding(to: str | None) -> Any:
        async def agent(ctx: RunContext) -> str:
            if to is None:
                return "leaf"
            result = await ctx.call(urls[to], ctx.text)
            assert isinstance(result, Task)
            return "forwarded"
        return agent

    provider = _provider()
    apps = {name: A2AApp(forwarding(to), observe=Tracing(provider))
            for name, to in (("C", None), ("B", "C"), ("A", "B"))}
    tracer = trace.get_tracer("test")
    async with served(apps["C"]) as c, served(apps["B"]) as b, served(apps["A"]) as a:
        urls.update(A=a, B=b, C=c)
        with tracer.start_as_current_span("caller") as root:
            async with A2AClient(a) as client:
                done = await client.send("go")
        assert isinstance(done, Task) and done.status.state is TaskState.COMPLETED
        trace_id = root.get_span_context().trace_id
        with anyio.fail_after(5):  # run spans end just after the answers are sent
            while sum(s.name == "A2A run" for s in spans.get_finished_spans()) < 3:
                await anyio.sleep(0.01)
    finished = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    by_id = _by_id(finished)

    def parent(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, span.name
        return by_id[span.parent.span_id]

    runs = [s for s in finished if s.name == "A2A run"]
    assert len(runs) == 3
    tasks = {s.attributes["a2a.task.id"]: s for s in runs}  # type: ignore[index]
    run_a = tasks[done.id]
    # caller -> client SendMessage -> A's request -> A's run -> client stream -> B's request ...
    chain = [run_a]
    for _ in range(2):
        client_span = next(s for s in finished if s.parent is not None
                           and s.parent.span_id == chain[-1].context.span_id
                           and s.kind is trace.SpanKind.CLIENT
                           and s.name == "SendStreamingMessage")
        request = next(s for s in finished if s.parent is not None
                       and s.parent.span_id == client_span.context.span_id)
        assert request.kind is trace.SpanKind.SERVER
        assert request.attributes["rpc.method"] == "SendStreamingMessage"  # type: ignore[index]
        assert request.attributes["a2a.dialect"] == "1.0"  # type: ignore[index]
        assert request.attributes["a2a.transport"] == "JSONRPC"  # type: ignore[index]
        run = next(s for s in runs if parent(s) is request)
        chain.append(run)
    request_a = parent(run_a)
    assert request_a.attributes["rpc.method"] == "SendMessage"  # type: ignore[index]
    assert parent(parent(request_a)).context.span_id == root.get_span_context().span_id
    for run in chain:
        attrs = run.attributes or {}
        assert attrs["a2a.run.mode"] == "interactive"
        assert attrs["a2a.run.outcome"] == "completed"
        assert attrs["a2a.run.reason"] == "completed"
        assert float(attrs["a2a.run.duration_ms"]) >= 0  # type: ignore[arg-type]


async def test_trace_context_from_message_metadata(spans: InMemorySpanExporter) -> None:
    """A request without trace headers (a hop that lost them) parents its run on metadata."""
    async def agent(ctx: RunContext) -> str:
        return "ok"

    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    app = A2AApp(agent, observe=Tracing(_provider()))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as http:
        body = await rpc(http, url, "SendMessage", {
            "message": text_message("hi"),
            "metadata": {"traceparent": f"00-{trace_id}-{span_id}-01"}})
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        with anyio.fail_after(5):
            while not any(s.name == "A2A run" for s in spans.get_finished_spans()):
                await anyio.sleep(0.01)
    run = next(s for s in spans.get_finished_spans() if s.name == "A2A run")
    assert f"{run.context.trace_id:032x}" == trace_id
    assert run.parent is not None and f"{run.parent.span_id:016x}" == span_id


async def test_json_log_lines_carry_the_run_fields_and_trace_ids(
    spans: InMemorySpanExporter,
) -> None:
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Capture()
    handler.setFormatter(JsonFormatter())
    runs_log = logging.getLogger("scoped_a2a.runs")
    runs_log.addHandler(handler)
    old_level = runs_log.level
    runs_log.setLevel(logging.INFO)

    async def agent(ctx: RunContext) -> str:
        return "ok"

    try:
        async with served(A2AApp(agent, observe=Tracing(_provider()))) as url, \
                A2AClient(url) as client:
            done = await client.send("hi")
            assert isinstance(done, Task)
            with anyio.fail_after(5):
                while not any('"run end' in line for line in lines):
                    await anyio.sleep(0.01)
    finally:
        runs_log.removeHandler(handler)
        runs_log.setLevel(old_level)
    records = [json.loads(line) for line in lines]
    end = next(r for r in records if r["message"].startswith("run end"))
    assert end["task"] == done.id and end["outcome"] == "completed"
    assert end["reason"] == "completed" and isinstance(end["duration_ms"], float)
    run = next(s for s in spans.get_finished_spans() if s.name == "A2A run")
    assert end["trace_id"] == f"{run.context.trace_id:032x}"
    assert end["span_id"] == f"{run.context.span_id:016x}"
    start = next(r for r in records if r["message"].startswith("run start"))
    assert start["mode"] == "interactive" and start["trace_id"] == end["trace_id"]


# --- metrics --------------------------------------------------------------------------------

def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_scraped_with_the_prometheus_parser() -> None:
    started = anyio.Event()

    async def agent(ctx: RunContext) -> str:
        if ctx.text == "fail":
            raise RuntimeError("boom")
        if ctx.text == "wait":
            started.set()
            await anyio.sleep(3600)
        return "ok"

    app = A2AApp(agent, observe=Metrics())
    async with served(app) as url, A2AClient(url) as client, \
            httpx.AsyncClient(timeout=10) as http:
        await client.send("ok")
        await client.send("fail")
        async with client.stream("wait") as events:
            await events.__anext__()
            await started.wait()
            during = _samples((await http.get(url + "metrics")).text)
        with anyio.fail_after(5):
            while True:
                page = await http.get(url + "metrics")
                after = _samples(page.text)
                if after.get(("scoped_a2a_runs_total",
                              (("outcome", "canceled"), ("reason", "hang-up")))) == 1:
                    break
                await anyio.sleep(0.02)
        assert page.headers["content-type"].startswith("text/plain")
    assert during[("scoped_a2a_streams_open", ())] == 1
    assert during[("scoped_a2a_runs_active", (("mode", "interactive"),))] == 1
    assert after[("scoped_a2a_streams_open", ())] == 0
    assert after[("scoped_a2a_runs_active", (("mode", "interactive"),))] == 0
    assert after[("scoped_a2a_runs_total", (("outcome", "completed"),
                                            ("reason", "completed")))] == 1
    assert after[("scoped_a2a_runs_total", (("outcome", "failed"), ("reason", "error")))] == 1
    assert after[("scoped_a2a_run_duration_seconds_count", ())] == 3
    assert after[("scoped_a2a_hangup_cancel_seconds_count", ())] == 1
    assert after[("scoped_a2a_hangup_cancel_seconds_sum", ())] < 5


async def test_no_metrics_page_by_default() -> None:
    async def agent(ctx: RunContext) -> str:
        return "ok"

    async with served(A2AApp(agent)) as url, httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(url + "metrics")).status_code == 404


def test_cli_json_logs_and_metrics() -> None:
    """``serve --log-format json --metrics``: every stderr line is JSON; /metrics counts."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", str(port), "--log-format",
         "json", "--metrics", "--grace", "1"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + ".well-known/agent-card.json").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        r = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                  "params": {"message": text_message("hello")}},
                       headers={"A2A-Version": "1.0"}, timeout=10)
        task_id = r.json()["result"]["task"]["id"]
        scraped = _samples(httpx.get(url + "metrics").text)
        assert sum(v for (name, _), v in scraped.items()
                   if name == "scoped_a2a_runs_total") == 1
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    records = [json.loads(line) for line in err.decode().splitlines() if line.strip()]
    end = next(r for r in records if r["message"].startswith("run end"))
    assert end["task"] == task_id and end["outcome"] == "completed"
    assert {"time", "level", "logger", "duration_ms", "reason"} <= set(end)


def test_nothing_imported_without_the_extras() -> None:
    """Serving and calling with observability off imports neither OpenTelemetry nor Prometheus."""
    script = """
import sys, anyio
from scoped_a2a import A2AApp, A2AClient
from scoped_a2a.cli import main  # the CLI module too (its options live in observe/)
sys.path.insert(0, sys.argv[1])
from tests.helpers import served

async def agent(ctx):
    return "ok"

async def go():
    async with served(A2AApp(agent)) as url, A2AClient(url) as client:
        await client.send("hi")

anyio.run(go)
bad = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "prometheus_client")))
assert not bad, bad
print("clean")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", script, root], capture_output=True, timeout=60,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.strip() == b"clean"
