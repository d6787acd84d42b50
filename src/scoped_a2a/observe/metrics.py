"""Prometheus metrics (extra ``metrics``): :class:`Metrics`, served on ``GET /metrics``.

- ``scoped_a2a_runs_active{mode}``: runs executing now, by mode at start (interactive, detached);
- ``scoped_a2a_runs_total{outcome,reason}``: runs ended (completed, failed, canceled; why);
- ``scoped_a2a_run_duration_seconds``: how long runs took (histogram);
- ``scoped_a2a_hangup_cancel_seconds``: from the moment a run lost its last caller (hang-up) to
  the moment its end was recorded (histogram);
- ``scoped_a2a_streams_open``: SSE requests (stream, subscribe) open now;
- ``scoped_a2a_store_errors_total{operation}``: task store operations that failed.

Several processes (``serve --workers N``): the supervisor gives its workers one directory in
``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode), each worker writes its
values there, and ``GET /metrics`` on any worker answers for all of them: counters and
histograms summed over every worker that ran (a restarted worker's counts are kept), gauges
summed over the live ones. One view, not per-worker labels: a scrape through the shared port
reaches whichever worker the kernel picks, so per-worker series could only be read one random
worker at a time (docs/observability.md).
"""

from __future__ import annotations

import contextvars
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .base import Observer, RunInfo

_STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask", "message/stream",
                             "tasks/resubscribe"})
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)

# Per request: whether it counted as an open stream (so its end can uncount it).
_streaming: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "scoped_a2a_metrics_streaming", default=None)


class Metrics(Observer):
    """Prometheus metrics in their own registry. Raises ImportError without prometheus-client.

    :param registry: a ``prometheus_client.CollectorRegistry`` (default: a new one, so two apps
        in one process do not share counters).
    """

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.shared = shared_directory() is not None
        """Whether the values are shared with the other workers of ``serve --workers``."""
        self.runs_active = Gauge("scoped_a2a_runs_active", "Runs executing now, by mode",
                                 ["mode"], registry=reg,
                                 multiprocess_mode="livesum")  # (only used when shared)
        self.runs = Counter("scoped_a2a_runs", "Runs ended, by outcome and reason",
                            ["outcome", "reason"], registry=reg)
        self.run_seconds = Histogram("scoped_a2a_run_duration_seconds", "Run duration",
                                     registry=reg)
        self.hangup_seconds = Histogram(
            "scoped_a2a_hangup_cancel_seconds",
            "From a run losing its last caller to its end being recorded",
            buckets=_LATENCY_BUCKETS, registry=reg)
        self.streams_open = Gauge("scoped_a2a_streams_open", "SSE streams open now",
                                  registry=reg, multiprocess_mode="livesum")
        self.store_errors = Counter("scoped_a2a_store_errors", "Task store operations that failed",
                                    ["operation"], registry=reg)
        for mode in ("interactive", "detached"):  # present (at 0) before the first run
            self.runs_active.labels(mode)

    @contextmanager
    def request(self, scope: Mapping[str, Any]) -> Iterator[None]:
        flag = [False]
        token = _streaming.set(flag)
        try:
            yield
        finally:
            _streaming.reset(token)
            if flag[0]:
                self.streams_open.dec()

    def request_method(self, method: str, dialect: str, transport: str = "JSONRPC") -> None:
        flag = _streaming.get()
        if flag is not None and not flag[0] and method in _STREAM_METHODS:
            flag[0] = True
            self.streams_open.inc()

    async def run(
        self, execute: Callable[..., Awaitable[None]], run: RunInfo, *args: Any
    ) -> None:
        gauge = self.runs_active.labels("detached" if run.detach_reason else "interactive")
        gauge.inc()
        try:
            await execute(run, *args)
        finally:
            gauge.dec()

    def run_ended(self, run: RunInfo, outcome: str, reason: str, seconds: float) -> None:
        self.runs.labels(outcome, reason).inc()
        self.run_seconds.observe(seconds)
        if reason == "hang-up" and run.cancelled_at is not None:
            self.hangup_seconds.observe(max(time.monotonic() - run.cancelled_at, 0.0))

    def store_error(self, operation: str) -> None:
        self.store_errors.labels(operation).inc()

    def metrics_page(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        if not self.shared:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client.multiprocess import MultiProcessCollector

        every = CollectorRegistry()  # read from every worker's files on each scrape
        MultiProcessCollector(every)  # type: ignore[no-untyped-call]
        return generate_latest(every), CONTENT_TYPE_LATEST


def shared_directory() -> str | None:
    """The directory the workers of ``serve --workers`` share their metrics in, if any."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
