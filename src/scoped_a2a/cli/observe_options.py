"""``serve``'s observability group: ``--log-level``, ``--log-format``, ``--metrics``,
``--tracing``; and building the observers they ask for (before the event loop starts, so a
missing extra is one line, not a traceback)."""

from __future__ import annotations

import argparse

from ..observe.base import Observer
from .help import add_log_level


def add_observe_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "observability",
        "Logs, Prometheus metrics and OpenTelemetry spans (docs/observability.md).")
    add_log_level(g, "INFO")
    g.add_argument("--log-format", choices=["text", "json"], default="text",
                   help="json: one JSON object per line, with trace ids when tracing")
    g.add_argument("--metrics", action="store_true",
                   help="serve Prometheus metrics on GET /metrics (needs the 'metrics' "
                        "extra: prometheus-client)")
    g.add_argument("--tracing", action="store_true",
                   help="OpenTelemetry spans for requests, runs and calls, sent to the "
                        "global tracer provider (needs the 'otel' extra; configure the "
                        "exporter with opentelemetry-instrument or OTEL_* variables)")


def observers_from(args: argparse.Namespace) -> list[Observer]:
    """The observers ``args`` ask for. Raises SystemExit with one line when an extra is missing."""
    found: list[Observer] = []
    if getattr(args, "metrics", False):
        try:
            from ..observe.metrics import Metrics
            found.append(Metrics())
        except ImportError:
            raise SystemExit("--metrics needs prometheus-client: "
                             "pip install 'scoped-a2a[metrics]'") from None
    if getattr(args, "tracing", False):
        try:
            from ..observe.tracing import Tracing
            found.append(Tracing())
        except ImportError:
            raise SystemExit("--tracing needs the OpenTelemetry API: "
                             "pip install 'scoped-a2a[otel]'") from None
    return found
