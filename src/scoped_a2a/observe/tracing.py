"""OpenTelemetry spans for requests and runs (extra ``otel``): :class:`Tracing`.

One server span per JSON-RPC request (method, dialect), its parent read from the request's
``traceparent``/``tracestate`` headers. One span per run (task id, mode and why, outcome, reason,
duration), the child of the request that started it; when that request carried no trace context
in its headers, the run's parent is read from the request or message metadata instead (hops that
lose headers). The run's span is current while the agent runs, so ``ctx.call`` client spans (and
the agent's own spans) are its children. Spans go to the tracer provider given, or the global one.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .base import Observer, RunInfo
from .propagation import TRACE_KEYS, TRACER_NAME

# Whether the current request carried a trace context in its headers (runs inherit it).
_from_headers: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "scoped_a2a_trace_from_headers", default=False)

_STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask", "message/stream",
                             "tasks/resubscribe"})


class Tracing(Observer):
    """Spans through the OpenTelemetry API. Raises ImportError without ``opentelemetry-api``.

    :param tracer_provider: where spans go (default: the global provider, as set by the
        OpenTelemetry SDK or ``opentelemetry-instrument``).
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        from opentelemetry import propagate, trace

        self._trace = trace
        self._propagate = propagate
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)

    @contextmanager
    def request(self, scope: Mapping[str, Any]) -> Iterator[None]:
        carrier = {}
        for name, value in scope.get("headers") or ():
            key = bytes(name).decode("latin-1").lower()
            if key in TRACE_KEYS:
                carrier[key] = bytes(value).decode("latin-1")
        parent = self._propagate.extract(carrier) if carrier else None
        token = _from_headers.set(bool(carrier))
        try:
            with self._tracer.start_as_current_span(
                "A2A request", context=parent, kind=self._trace.SpanKind.SERVER,
                attributes={"rpc.system": "jsonrpc", "a2a.transport": "JSONRPC",
                            "url.path": str(scope.get("path", "")),
                            "network.protocol.version": str(scope.get("http_version", ""))},
                record_exception=False, set_status_on_exception=False,
            ) as span:
                try:
                    yield
                except Exception as exc:
                    span.set_status(self._trace.StatusCode.ERROR, type(exc).__name__)
                    raise
                except BaseException:  # cancelled from outside (the server is going away)
                    span.set_attribute("a2a.cancelled", True)
                    raise
        finally:
            _from_headers.reset(token)

    def request_method(self, method: str, dialect: str) -> None:
        span = self._trace.get_current_span()
        span.update_name(method)
        span.set_attributes({"rpc.method": method, "a2a.dialect": dialect,
                             "a2a.streaming": method in _STREAM_METHODS})

    async def run(
        self, execute: Callable[..., Awaitable[None]], run: RunInfo, *args: Any
    ) -> None:
        parent = None
        if not _from_headers.get():
            ctx = args[0] if args else None
            meta = getattr(ctx, "metadata", None) or {}
            carrier = {k: str(meta[k]) for k in TRACE_KEYS if k in meta}
            if carrier:
                parent = self._propagate.extract(carrier)
        mode = "detached" if run.detach_reason is not None else "interactive"
        attributes = {"a2a.task.id": run.task_id, "a2a.context.id": run.context_id,
                      "a2a.run.mode": mode}
        if run.detach_reason is not None:
            attributes["a2a.run.detach_reason"] = run.detach_reason
        with self._tracer.start_as_current_span(
            "A2A run", context=parent, kind=self._trace.SpanKind.INTERNAL,
            attributes=attributes, record_exception=False, set_status_on_exception=False,
        ):
            await execute(run, *args)

    def run_ended(self, run: RunInfo, outcome: str, reason: str, seconds: float) -> None:
        span = self._trace.get_current_span()  # the run's span: this runs in the run's task
        attributes: dict[str, str | float] = {
            "a2a.run.outcome": outcome, "a2a.run.reason": reason,
            "a2a.run.duration_ms": round(seconds * 1000, 3)}
        if run.detach_reason is not None:  # a follow-up may have detached it since the start
            attributes["a2a.run.mode"] = "detached"
            attributes["a2a.run.detach_reason"] = run.detach_reason
        span.set_attributes(attributes)
        if outcome == "failed":
            span.set_status(self._trace.StatusCode.ERROR, reason)
