"""The deadline extension: how long a caller gives a run, read from request metadata (no I/O).

A caller puts either an absolute UTC deadline or a relative budget in the request's ``metadata``
(or the message's), under keys prefixed with the extension's URI, as A2A's extension guide does
(a bare ``deadline`` key is too likely to be a caller's own business data, e.g. a CRM's due date,
which would otherwise cancel the run)::

    {"https://github.com/scoped-a2a/scoped-a2a/ext/deadline/v1/deadline":
        "2026-12-01T08:00:00.000Z"}              # RFC 3339, with Z or an offset
    {"https://github.com/scoped-a2a/scoped-a2a/ext/deadline/v1/budgetMs": 1500}
                                                 # milliseconds from the request's arrival

Both may be given; the earlier end wins. ``ctx.call`` passes the remaining budget (minus a
margin) downstream as ``budgetMs``, which needs no synchronised clocks.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

from .errors import InvalidParams

DEADLINE_EXTENSION_URI = "https://github.com/scoped-a2a/scoped-a2a/ext/deadline/v1"
DEADLINE_KEY = DEADLINE_EXTENSION_URI + "/deadline"
BUDGET_KEY = DEADLINE_EXTENSION_URI + "/budgetMs"

CARD_ENTRY: dict[str, Any] = {
    "uri": DEADLINE_EXTENSION_URI,
    "description": f"Request metadata {DEADLINE_KEY!r} (RFC 3339 UTC time) or {BUDGET_KEY!r} "
    "(milliseconds): the run is cancelled then, recorded canceled with reason 'deadline'",
    "required": False,
    "params": {"deadlineKey": DEADLINE_KEY, "budgetKey": BUDGET_KEY},
}


def budget_from(*metadatas: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """Seconds the caller gives the run from now (may be <= 0: already past), or None.

    Reads every mapping given (request metadata, message metadata); the smallest budget wins.
    ``now`` is the wall-clock time (``time.time()``) to measure an absolute deadline against.
    Raises InvalidParams, naming the key and the expected form, for a value it cannot read.
    """
    budgets: list[float] = []
    for meta in metadatas:
        if not meta:
            continue
        if BUDGET_KEY in meta:
            raw = meta[BUDGET_KEY]
            if (isinstance(raw, bool) or not isinstance(raw, (int, float))
                    or not math.isfinite(raw) or raw < 0):
                raise InvalidParams(
                    f"metadata {BUDGET_KEY!r} must be a number of milliseconds >= 0, "
                    f"not {raw!r}")
            budgets.append(raw / 1000.0)
        if DEADLINE_KEY in meta:
            budgets.append(_seconds_until(meta[DEADLINE_KEY], now))
    return min(budgets) if budgets else None


def _seconds_until(raw: Any, now: float | None) -> float:
    hint = (f"metadata {DEADLINE_KEY!r} must be an RFC 3339 UTC time such as "
            f"'2026-12-01T08:00:00.000Z', not {raw!r}")
    if not isinstance(raw, str):
        raise InvalidParams(hint)
    try:
        when = datetime.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidParams(hint) from None
    if when.tzinfo is None:
        raise InvalidParams(hint + " (it has no time zone)")
    if now is None:
        now = datetime.datetime.now(datetime.UTC).timestamp()
    return when.timestamp() - now
