"""Per-caller limits: how many runs one principal may have working, and parked, at once.

One caller must not fill the server nursery. A new task is refused (nothing is stored) when its
principal already has ``max_runs`` runs working, or ``max_parked`` runs parked in ``ctx.ask``
waiting for its input. A follow-up that answers a parked run starts no run and is not refused.
Without authentication every caller is the one anonymous principal, so the limits then apply
to the whole server. Counts are per process: on Redis, runs executing on other replicas and
detached runs still queued are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.errors import LimitExceeded
from .run import Run


@dataclass(frozen=True, slots=True)
class CallerLimits:
    """``max_runs``: runs working at once per principal; ``max_parked``: runs parked in
    ``ctx.ask`` per principal (None: no limit)."""

    max_runs: int | None = None
    max_parked: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_runs", "max_parked"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None for no limit)")


class CallerRuns:
    """The runs of this process by principal id, checked against :class:`CallerLimits`."""

    def __init__(self, limits: CallerLimits | None = None) -> None:
        self.limits = limits or CallerLimits()
        self._runs: dict[str, set[Run]] = {}
        self.refused = 0
        """New tasks refused by a per-caller limit (a metric)."""

    def check(self, principal_id: str) -> None:
        """Raise LimitExceeded (naming the limit) if ``principal_id`` may not start a run now."""
        limits = self.limits
        if limits.max_runs is None and limits.max_parked is None:
            return
        runs = self._runs.get(principal_id, ())
        parked = sum(1 for r in runs if r.parked)
        working = len(runs) - parked
        if limits.max_runs is not None and working >= limits.max_runs:
            self.refused += 1
            raise LimitExceeded(
                f"you have {working} runs working, the limit per caller "
                f"(max-runs-per-caller {limits.max_runs}); send again once one ends")
        if limits.max_parked is not None and parked >= limits.max_parked:
            self.refused += 1
            raise LimitExceeded(
                f"you have {parked} tasks waiting for your input, the limit per caller "
                f"(max-parked-per-caller {limits.max_parked}); answer or cancel one first")

    def add(self, principal_id: str, run: Run) -> None:
        self._runs.setdefault(principal_id, set()).add(run)

    def remove(self, principal_id: str, run: Run) -> None:
        runs = self._runs.get(principal_id)
        if runs is not None:
            runs.discard(run)
            if not runs:
                del self._runs[principal_id]
