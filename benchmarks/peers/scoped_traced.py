"""scoped-a2a's ``serve`` command with OpenTelemetry tracing on, spans going to the SDK's
in-memory exporter (cleared every 10,000 spans so memory stays flat): the "OTel on" row of the
observability-cost scenario. Arguments are those of ``scoped-a2a serve``."""

from __future__ import annotations

import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scoped_a2a.cli import main


class CappedExporter(InMemorySpanExporter):
    def export(self, spans):  # type: ignore[no-untyped-def]
        result = super().export(spans)
        if len(self._finished_spans) > 10_000:
            self.clear()
        return result


if __name__ == "__main__":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(CappedExporter()))
    trace.set_tracer_provider(provider)
    sys.exit(main(["serve", "--tracing", *sys.argv[1:]]))
