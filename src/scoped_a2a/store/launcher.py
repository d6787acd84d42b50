"""Where detached runs are launched: the seam between the runner and a shared task store (no I/O).

It lives in the store layer because a store offers the launcher and the runtime uses it: the
runner is seen here only through :class:`RunRegistry`, so the store never imports the runtime.

By default the runner executes every run in its own server nursery. A store shared by several
processes (the Redis store) can offer a :class:`RunLauncher` instead: the runner then hands every
*new detached* run to it, and the launcher stores the task and queues the run durably, atomically,
before the send is acknowledged. Any worker process executes it later. The launcher also carries
cancel requests to whichever process executes a run, and delivers such requests to the runners
bound to it.
"""

from __future__ import annotations

from collections.abc import Mapping
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
