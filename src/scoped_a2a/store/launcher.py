"""Where detached runs are launched: the seam between the runner and a shared task store (no I/O).

It lives in the store layer because a store offers the launcher and the runtime uses it: the
runner is seen here only through :class:`RunRegistry`, so the store never imports the runtime.

By default the runner executes every run in its own server nursery. A store shared by several
processes (the Redis store) can offer a :class:`RunLauncher` instead: the runner then hands every
*new detached* run to it, and the launcher stores the task and queues the run durably, atomically,
before the send is acknowledged. Any worker process executes it later. The launcher also carries
cancel requests to whichever process executes a run, and delivers such requests to the runners
bound to it.

The consumer side of such a queue is :class:`DurableQueue`: the one worker of the runtime layer
(``runtime.durable_worker.Worker``) executes the runs of any store that offers it (Redis,
SQLite), so no store imports the runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ..protocol.types import Message, Task


class CancellableRun(Protocol):
    """A run as a launcher sees it: something it can cancel (``runtime.run.Run``)."""

    def cancel(self, reason: str) -> None:
        """Cancel the run's scope; the first reason given is the one recorded."""


class RunRegistry(Protocol):
    """The runs one process executes, by task id (``runtime.runner.Runner``)."""

    def get(self, task_id: str) -> CancellableRun | None:
        """The run executing ``task_id`` here, or None."""


class RunLauncher(Protocol):
    """A durable queue for detached runs, plus cross-process cancellation."""

    runs_elsewhere: bool
    """Whether runs may execute in other processes (Redis: workers and replicas; SQLite: no,
    every run of the file executes in its one process). Error texts say where a run is."""

    def bind(self, runner: RunRegistry) -> None:
        """Deliver cancel requests from other processes to ``runner``'s runs from now on."""

    async def submit(
        self,
        task: Task,
        message: Message,
        *,
        request_metadata: Mapping[str, Any] | None,
        detach_reason: str,
        owner: str = "",
    ) -> None:
        """Store the new ``task`` (owned by the principal id ``owner``) and queue its run, both
        or neither.

        Returns once both are stored; raises ``ServerUnavailable`` when they could not be (the
        send must then fail: nothing is accepted that is not stored). Cancellation: the task
        and its run are either both stored or neither is.
        """

    async def cancel_elsewhere(self, task_id: str) -> None:
        """Ask whichever process executes ``task_id``'s run to cancel its scope now.

        Best effort and fire-and-forget: the caller has already recorded the task as canceled
        (terminal states never change), so a process that misses the request still stops the
        run at its next write.
        """


@dataclass(slots=True)
class Job:
    """One queued run, as a worker reads it from a durable queue."""

    entry_id: bytes  # the queue's own id of the entry (a stream id, a row id)
    task_id: str
    message: Message
    request_metadata: dict[str, Any] | None
    detach_reason: str
    owner: str = ""  # the principal id of the sender (the run's ctx.principal.id)


class DurableQueue(RunLauncher, Protocol):
    """The consumer side of a durable run queue, as the worker uses it.

    Every method raises ``ServerUnavailable`` when the store cannot be reached (the worker backs
    off and tries again) and is safe to cancel: a lease taken or renewed by a cancelled call
    simply runs out.
    """

    async def prepare(self) -> None:
        """Make the queue ready to be read (a consumer group, ...); idempotent."""

    async def read_new(self, consumer: str, count: int, block_ms: int) -> list[Job]:
        """Up to ``count`` entries no worker has had yet (waits up to ``block_ms`` for one)."""

    async def reclaim(self, consumer: str, count: int, min_idle_ms: int) -> list[Job]:
        """Up to ``count`` entries whose worker has not renewed them for ``min_idle_ms``."""

    async def claim(self, job: Job, token: str, lease_ms: int) -> tuple[int, Task | None]:
        """Take the run's lease: (attempt, the task), or (0, None) if the task ended, (-1,
        None) if it is gone, (-2, None) if another worker holds the lease."""

    async def renew(self, job: Job, consumer: str, token: str, lease_ms: int) -> int:
        """Extend the lease and the entry: 1 running, 0 the task ended, -1 the lease is lost."""

    async def retire(self, job: Job, token: str) -> bool:
        """Drop the lease; remove the entry if its run's end is recorded (True)."""

    async def release(self, job: Job, token: str) -> None:
        """Drop the lease but keep the entry, so the run is delivered again later."""

    def fenced(self, task_id: str, token: str) -> AbstractContextManager[None]:
        """While in the body, this process's appends to ``task_id`` need the lease ``token``
        (an append without it raises ``TaskEnded``)."""
