"""What a shared store offers for the liveness leases of interactive runs (no I/O here):
:class:`ProcessLeases`, one object per process. The rule and the loop that keeps it are in
:mod:`.liveness`; Redis implements it in ``store/redis/leases.py``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

DEFAULT_LEASE = 10.0
"""Seconds a process may go without renewing its lease before its interactive runs are
recorded lost (``serve --lease``). Renewed every third of it, so a process must miss three
renewals in a row (a long GC pause, a store failover) before it is declared dead."""


class ProcessLeases(Protocol):
    """What a shared store offers for liveness leases (one object per process)."""

    process_id: str
    """This process's id, unique per start (a restarted process is a new one)."""

    lease: float
    """Seconds without a renewal after which this process's runs are recorded lost."""

    async def beat(self) -> bool:
        """Renew this process's lease; False if it had lapsed (its runs may have been recorded
        lost meanwhile; they stop at their next write). Raises ServerUnavailable."""

    async def lapsed(self) -> list[tuple[str, list[str]]]:
        """Processes whose lease lapsed, each with (some of) its registered tasks that are still
        running, for this caller to record lost now: ``[(process id, [task id, ...])]``.

        A process is handed to one caller at a time for a while (if that caller dies, another
        gets it); a lapsed process none of whose tasks still runs is forgotten.
        Raises ServerUnavailable."""

    async def covers(self, task_id: str) -> bool:
        """Whether the task was stored for an interactive run, covered by some process's lease
        (a queued run is not). Raises ServerUnavailable."""

    async def alive(self, process_ids: Collection[str]) -> set[str]:
        """Those of ``process_ids`` whose lease is current (not lapsed, not retired).
        Raises ServerUnavailable."""

    async def retire(self) -> None:
        """On a clean exit: forget this process unless it still has runs registered (then its
        lease lapses and they are recorded lost). Raises ServerUnavailable."""
