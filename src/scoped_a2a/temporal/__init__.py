"""Run scoped-a2a steps inside Temporal activities (the optional extra ``temporal``).

- :class:`ActivityStep`: a ``Step`` that heartbeats its followers' positions to the activity
  it runs in, ends at once when the activity is cancelled, and resumes from the last heartbeat
  when a retried attempt runs it again;
- :class:`SlotLedger`: an activity slot supplier for a Temporal worker that records when each
  slot is used and released (the worker's own accounting of free slots);
- :class:`StepProgress`: the heartbeat details.

Temporal's Python SDK runs on asyncio only, so does this module. See docs/temporal.md.
"""

from __future__ import annotations

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "scoped_a2a.temporal needs the Temporal SDK: pip install 'scoped-a2a[temporal]'"
    ) from exc

from .activity_step import DEFAULT_HEARTBEAT_EVERY, ActivityStep, heartbeat_interval
from .progress import StepProgress, TurnProgress
from .slots import SlotLedger, SlotUse

__all__ = [
    "DEFAULT_HEARTBEAT_EVERY",
    "ActivityStep",
    "SlotLedger",
    "SlotUse",
    "StepProgress",
    "TurnProgress",
    "heartbeat_interval",
]
