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
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .base import Observer, RunInfo
from .propagation import TRACE_KEYS, TRACER_NAME

# Whether the current request carried a trace context in its headers (runs inherit it).
_from_headers: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "scoped_a2a_trace_from_headers", default=False)

_TRACE_KEY_LENGTHS = frozenset(len(k) for k in TRACE_KEYS)


class _Pending:
    """A request whose span starts once its method is known (see ``Tracing.request``)."""

    __slots__ = ("attached", "parent", "scope", "span", "started_ns")

    def __init__(self, parent: Any, started_ns: int, scope: Mapping[str, Any]) -> None:
        self.parent = parent
        self.started_ns = started_ns
        self.scope = scope
        self.span: Any = None
        self.attached: Any = None


_pending: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar(
    "scoped_a2a_pending_request_span", default=None)

_STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask", "message/stream",
                             "tasks/resubscribe"})


class Tracing(Observer):
    """Spans through the OpenTelemetry API. Raises ImportError without ``opentelemetry-api``.

    :param tracer_provider: where spans go (default: the global provider, as set by the
        OpenTelemetry SDK or ``opentelemetry-instrument``).
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        from opentelemetry import context, propagate, trace

        self._context = context
        self._trace = trace
        self._propagate = propagate
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)

    @contextmanager
    def request(self, scope: Mapping[str, Any]) -> Iterator[None]:
        # The span starts (back-dated to here) once the method is known, in request_method, so
        # its name and attributes go in at creation: renaming and setting attributes on a live
        # SDK span each take its lock and re-validate, which was a third of the tracing cost.
        carrier = {}
        for name, value in scope.get("headers") or ():
            if len(name) in _TRACE_KEY_LENGTHS:
                key = bytes(name).decode("latin-1").lower()
                if key in TRACE_KEYS:
                    carrier[key] = bytes(value).decode("latin-1")
        pending = _Pending(self._propagate.extract(carrier) if carrier else None,
                           time.time_ns(), scope)
        token = _from_headers.set(bool(carrier))
        pending_token = _pending.set(pending)
        try:
            yield
        except Exception as exc:
            span = pending.span or self._start(pending, "A2A request", None, None)
            span.set_status(self._trace.StatusCode.ERROR, type(exc).__name__)
            raise
        except BaseException:  # cancelled from outside (the server is going away)
            span = pending.span or self._start(pending, "A2A request", None, None)
            span.set_attribute("a2a.cancelled", True)
            raise
        finally:
            span = pending.span or self._start(pending, "A2A request", None, None)
            if pending.attached is not None:
                self._context.detach(pending.attached)
            span.end()
            _pending.reset(pending_token)
            _from_headers.reset(token)

    def _start(self, pending: _Pending, name: str, dialect: str | None,
               transport: str | None) -> Any:
        scope = pending.scope
        attributes: dict[str, Any] = {
            "rpc.system": "jsonrpc" if transport != "HTTP+JSON" else "http",
            "a2a.transport": transport or "JSONRPC",
            "url.path": str(scope.get("path", "")),
            "network.protocol.version": str(scope.get("http_version", "")),
        }
        if dialect is not None:
            attributes.update({"rpc.method": name, "a2a.dialect": dialect,
                               "a2a.streaming": name in _STREAM_METHODS})
        span = self._tracer.start_span(
            name, context=pending.parent, kind=self._trace.SpanKind.SERVER,
            attributes=attributes, start_time=pending.started_ns,
            record_exception=False, set_status_on_exception=False)
        pending.span = span
        return span

    def request_method(self, method: str, dialect: str, transport: str = "JSONRPC") -> None:
        pending = _pending.get()
        if pending is None or pending.span is not None:
            return
        span = self._start(pending, method, dialect, transport)
        # Current from here on: the run this request starts is its child.
        pending.attached = self._context.attach(self._trace.set_span_in_context(span))

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
        # start_span and attach by hand: start_as_current_span nests two generator-based
        # context managers per span, a visible share of the per-run cost.
        span = self._tracer.start_span(
            "A2A run", context=parent, kind=self._trace.SpanKind.INTERNAL,
            attributes=attributes, record_exception=False, set_status_on_exception=False)
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            await execute(run, *args)
        finally:
            self._context.detach(token)
            span.end()

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
