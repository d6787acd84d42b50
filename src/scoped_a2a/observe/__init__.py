"""Watching the server: traces, metrics and JSON logs, each optional (extras ``otel``, ``metrics``).

The app and the runner call one :class:`Observer`; the default does nothing and imports nothing.
:class:`~.tracing.Tracing` (OpenTelemetry) and :class:`~.metrics.Metrics` (Prometheus) import
their libraries only when constructed; :class:`Observers` combines several.
"""

from .base import NOOP, Observer, Observers, RunInfo

__all__ = ["NOOP", "Observer", "Observers", "RunInfo"]
