"""W3C trace context on outgoing calls: ``traceparent``/``tracestate`` headers, client spans.

Active only when the program uses OpenTelemetry (``opentelemetry.trace`` is imported, which any
OpenTelemetry set-up does): then each JSON-RPC call of :class:`~scoped_a2a.A2AClient` gets a
client span and carries its context in the headers, and ``ctx.call`` also puts the run's trace
context in the request metadata (for hops that lose headers: queues, proxies). Otherwise nothing
here imports anything or costs more than a dictionary lookup.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

TRACE_KEYS = ("traceparent", "tracestate")
TRACER_NAME = "scoped_a2a"


def active() -> bool:
    """True when the program has imported the OpenTelemetry API."""
    return "opentelemetry.trace" in sys.modules


@contextmanager
def client_span(method: str, url: str, headers: MutableMapping[str, str]) -> Iterator[None]:
    """A client span around one call; its context is written into ``headers``.

    The span is not made current (a stream's body runs outside it); it ends when the ``with``
    does, recording the exception type if the call failed or was cancelled.
    """
    if not active():
        yield
        return
    from opentelemetry import propagate, trace

    span = trace.get_tracer(TRACER_NAME).start_span(
        method, kind=trace.SpanKind.CLIENT,
        attributes={"rpc.system": "jsonrpc", "rpc.method": method, "url.full": url})
    propagate.inject(headers, context=trace.set_span_in_context(span))
    try:
        yield
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__name__)
        if isinstance(exc, Exception):
            span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
        raise
    finally:
        span.end()


def inject_metadata(metadata: MutableMapping[str, Any]) -> None:
    """Add the current trace context to request ``metadata`` (no-op without OpenTelemetry)."""
    if not active():
        return
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    for key in TRACE_KEYS:
        if key in carrier:
            metadata[key] = carrier[key]


def current_ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) in hex, or None (no OpenTelemetry, no span)."""
    if not active():
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
