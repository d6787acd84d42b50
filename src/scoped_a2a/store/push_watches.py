"""Push watches that outlive their process, on a shared store (no I/O here).

A push config's *watch* (``push/service.py``) follows its task's log and delivers each state
change. On one process the watch lives and dies with it; SQLite resumes every unfinished watch
at the next start (``TaskStore.pending_pushes``). On a shared store other replicas keep serving
when one stops, so the watch must move to one of them, and to exactly one: two replicas
watching the same config would deliver every state change twice.

The rule: **each watch is owned by one process**, recorded with its progress (the last log
position handled, the state there, the config's dialect). The owner records progress after each
delivery only while it still owns the watch (a fenced write: a process whose lease lapsed and
whose watch another process took learns it there, and stops). A watch is free for any process
to *adopt* when its owner released it (a clean shutdown: :meth:`PushWatches.release`) or when
its owner's liveness lease lapsed (``store/liveness.py``: killed, lost). Every serving process
checks for such watches every third of the lease and adopts at most a batch at a time, each by
one atomic write, so each free watch goes to exactly one process, which resumes it after the
last state change delivered.

What this promises: a state change is delivered once while its watch's owner lives; a
delivery in flight when its owner is killed is made again by the adopter (the same delivery id,
its ``Idempotency-Key`` header, so a receiver can drop the copy); a replica shut down cleanly
finishes the delivery in flight, then hands the rest over (nothing is made twice).

Implementations: Redis (``store/redis/push_watches.py``), PostgreSQL
(``store/postgres/push_watches.py``).
"""

from __future__ import annotations

from typing import Protocol

Progress = tuple[int, str, bool]
"""(cursor: the last log position handled, the task's state there, v1: the config's dialect)."""

Pending = tuple[str, str, int, str, bool]
"""(task id, config id, cursor, state, v1): a watch to resume."""


class PushWatches(Protocol):
    """Who watches each push config, on a store that several processes share."""

    process_id: str
    """This process's id (its liveness lease's)."""

    period: float
    """Seconds between two checks for watches to adopt (a third of the lease)."""

    async def own(self, task_id: str, config_id: str, progress: Progress) -> Progress | None:
        """Take the watch of a config just set, from ``progress`` on; returns where to watch
        from (the recorded progress if the watch already existed, unowned or owned by a lapsed
        process: nothing before it is skipped), or None if a live process watches it already
        (it delivers to the config as it is now). Raises ServerUnavailable."""

    async def progress(self, task_id: str, config_id: str, progress: Progress) -> bool:
        """Record how far this process's watch got; False if it is not this process's any
        more (another took it: stop watching, deliver nothing more). Raises
        ServerUnavailable."""

    async def done(self, task_id: str, config_id: str) -> None:
        """The watch ended (its task ended and the end was delivered, its config was deleted,
        its task is gone): nobody is to adopt it. Raises ServerUnavailable."""

    async def release(self, watches: list[tuple[str, str]]) -> None:
        """Leave these watches (task id, config id) of this process to others (shutdown);
        their recorded progress is where the adopter resumes. Raises ServerUnavailable."""

    async def adopt(self, limit: int) -> list[Pending]:
        """At most ``limit`` watches released, or left by processes whose lease lapsed, now
        this process's (each adopted by one caller only). A call after one that raised (its
        reply may have been lost after the store adopted a batch) may also return watches
        this process owns already, some of which it may be watching: the caller skips those.
        Raises ServerUnavailable."""
