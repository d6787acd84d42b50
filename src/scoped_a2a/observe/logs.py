"""``--log-format json``: one JSON object per log line, run lines split into fields, trace ids.

Every record becomes ``{"time", "level", "logger", "message", ...}``. The ``key=value`` fields of
a line (the runner's ``run start task=... mode=...`` and ``run end task=... outcome=...
duration_ms=... reason=...``) become fields of their own (``duration_ms`` a number), and
``trace_id``/``span_id`` are added when the line is written inside an OpenTelemetry span (a run's
lines are written inside the run's span when tracing is on). An exception's traceback goes in
``exc_info`` as text.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
from typing import Any

from .propagation import current_ids

# key=value; a value may be followed by one parenthesised remark ("detached (rule k=v)").
_FIELD = re.compile(r"(?<![\w.])([a-z_]+)=((?:\([^)]*\)|[^\s(])+(?: \([^)]*\))?)")
_RESERVED = frozenset({"time", "level", "logger", "message", "trace_id", "span_id", "exc_info"})


class JsonFormatter(logging.Formatter):
    """Formats each record as one line of JSON (no newline inside)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out: dict[str, Any] = {
            "time": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key, value in _FIELD.findall(message):
            if key not in _RESERVED:
                out[key] = _number(key, value)
        ids = current_ids()
        if ids is not None:
            out["trace_id"], out["span_id"] = ids
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def _number(key: str, value: str) -> Any:
    if key.endswith(("_ms", "_s")):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def use_json_logs(level: int) -> None:
    """Configure the root logger to write JSON lines to stderr at ``level``."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
