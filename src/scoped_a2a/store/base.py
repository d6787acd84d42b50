"""The task store interface: task snapshots plus each task's append-only event log.

A store owns the one rule that must never bend: **terminal states never change**. An event
appended to a terminal task is refused (:class:`TaskEnded`), so a late write from a run that lost
a race with CancelTask or shutdown cannot overwrite the recorded outcome.

Positions are integers per task: the task is created at position 0, and each appended event takes
the next one. A snapshot is always "the task as of position N", so a reader can take a snapshot and
then follow the log from N without missing or repeating an event.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..protocol.errors import InvalidParams, TaskNotFound
from ..protocol.trajectory import LogEvent
from ..protocol.types import ListTasksRequest, Task, TaskPushNotificationConfig
from .claims import NewClaim, PriorSend

if TYPE_CHECKING:
    from .handover import HandoverTransport
    from .launcher import RunLauncher
    from .process_leases import ProcessLeases
    from .push_watches import PushWatches


def page_bounds(request: ListTasksRequest) -> tuple[int, int | None]:
    """A ListTasks request's page size and its page token as a position, checked (every store
    issues the position its page ended before as the next token). Raises InvalidParams."""
    size = request.page_size or 50
    if not 1 <= size <= 100:
        raise InvalidParams("pageSize must be between 1 and 100")
    if not request.page_token:
        return size, None
    try:
        return size, int(request.page_token)
    except ValueError:
        raise InvalidParams("pageToken is not one this server issued") from None


class TaskEnded(Exception):
    """An event was appended to a task that is already terminal; the event was dropped."""


@dataclass(slots=True)
class LogEntry:
    position: int
    event: LogEvent
    encoded: bytes  # the event's 1.0 JSON, encoded once and reused by every reader


@dataclass(slots=True)
class LogPage:
    """A bounded read of a task's log: ``entries`` after the cursor, and where to read next."""

    entries: list[LogEntry]
    next: int  # the position of the last entry returned (the cursor for the next read)
    has_more: bool
    task: Task  # the snapshot at read time (its status tells whether following should go on)
    first_retained: int = 1  # events before this position were dropped by the per-task cap


@dataclass(slots=True)
class TaskPage:
    tasks: list[Task]
    next_page_token: str
    total_size: int
    page_size: int = 0
    extra: dict[str, object] = field(default_factory=dict)


class TaskStore(abc.ABC):
    """Where tasks live. Methods raise ``TaskNotFound`` for unknown (or evicted) task ids.

    Cancellation: every method is safe to cancel; a cancelled ``append`` either happened
    completely or not at all.
    """

    @abc.abstractmethod
    async def create(self, task: Task, *, owner: str = "") -> None:
        """Store a new task at position 0, owned by the principal id ``owner``.

        The empty owner is the anonymous principal (a server without authentication).
        """

    @abc.abstractmethod
    async def owner_of(self, task_id: str) -> str:
        """The principal id that owns the task ("" for anonymous); TaskNotFound if unknown."""

    @abc.abstractmethod
    async def get(self, task_id: str) -> tuple[Task, int]:
        """The task's snapshot and the position it reflects.

        The snapshot belongs to the store: do not mutate it, and encode it before the next await.
        """

    async def check_owner(self, task_id: str, owner: str) -> None:
        """Raise TaskNotFound unless ``task_id`` exists and belongs to the principal ``owner``.

        Another owner's task gets exactly the answer of a task that does not exist, so a
        caller cannot learn which ids exist.
        """
        if await self.owner_of(task_id) != owner:
            raise TaskNotFound(f"task {task_id!r} not found")

    @abc.abstractmethod
    async def append(self, task_id: str, event: LogEvent) -> int:
        """Append one event, apply it to the snapshot, wake waiters; return its position.

        Raises :class:`TaskEnded` if the task is terminal (the event is dropped).
        """

    @abc.abstractmethod
    async def read(
        self, task_id: str, after: int, *, max_events: int = 1000, max_bytes: int = 1 << 20
    ) -> LogPage:
        """Events after position ``after``, at most ``max_events`` and about ``max_bytes``.

        The first event is always returned whatever its size, so one large event cannot stall a
        reader.
        """

    @abc.abstractmethod
    async def wait(self, task_id: str, after: int) -> None:
        """Return once the log holds an event after ``after`` (at once if it already does).

        Also returns when the task is evicted, so a waiter re-reads and sees ``TaskNotFound``.
        """

    def wake(self, task_id: str) -> None:  # noqa: B027  # a store that keeps waiters has it
        """Wake every ``wait`` on ``task_id`` with nothing appended: its callers check why
        they follow (a run whose end cannot be stored). Default: nothing (a polling store's
        waiters come back by themselves)."""

    def ended_json(self, task_id: str) -> bytes | None:
        """The snapshot of ``task_id`` as JSON, if the task has ended and the store keeps it
        encoded (so a caller that only sends it on need not decode and encode it again);
        None otherwise (then read it with :meth:`get`). Synchronous. Default: None."""
        return None

    def pin(self, task_id: str) -> None:  # noqa: B027  # a store that evicts ended tasks has it
        """Keep ``task_id`` readable once it ends, until :meth:`unpin`: a caller waiting for
        its end elsewhere than in :meth:`wait` (which pins by itself) reads it right after.
        Synchronous; an unknown task is ignored. Default: nothing (nothing is evicted early)."""

    def unpin(self, task_id: str) -> None:  # noqa: B027  # see pin
        """Undo one :meth:`pin` (a task no longer known is ignored)."""

    def lost_events(self, task_id: str) -> str | None:
        """Why some events appended to ``task_id`` were not stored after all (a store that
        acknowledges an append before its commit, and whose commit then failed); None when
        every acknowledged event is stored. The run's end must not say it completed then.
        Default: None (each append is stored before it returns)."""
        return None

    @abc.abstractmethod
    async def list_tasks(self, request: ListTasksRequest, *, owner: str | None = None) -> TaskPage:
        """Tasks newest first, filtered and paged as ``ListTasks`` asks.

        ``owner``: only the tasks of that principal id (None: everyone's, for operators).
        """

    # push-notification configs, stored with the task
    @abc.abstractmethod
    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None: ...

    @abc.abstractmethod
    async def push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]: ...

    @abc.abstractmethod
    async def delete_push_config(self, task_id: str, config_id: str) -> bool: ...

    async def push_progress(  # noqa: B027  # only a store that outlives its process keeps it
        self, task_id: str, config_id: str, cursor: int, state: str, v1: bool
    ) -> None:
        """A push config's watch has handled the log up to ``cursor``, where the task's state
        was ``state`` (``v1``: the config's dialect). A store that survives a restart keeps it,
        so the next process resumes the watch there (``pending_pushes``)."""

    async def pending_pushes(self) -> list[tuple[str, str, int, str, bool]]:
        """The push watches a previous process left unfinished, as ``push_progress`` last
        recorded them: (task id, config id, cursor, state, v1). None in memory."""
        return []

    # message claims: a resent messageId is the same send (docs/exactly-once.md)
    @property
    def dedupes_sends(self) -> bool:
        """Whether this store keeps message claims (then the card declares idempotent sends)."""
        return type(self).claim_message is not TaskStore.claim_message

    async def claim_message(
        self, owner: str, message_id: str, fingerprint: bytes, task_id: str, *,
        position: int = 0, created: bool = False,
    ) -> PriorSend | None:
        """Claim ``message_id`` of ``owner`` for ``task_id``, atomically: None if no earlier
        send of it is known (this send goes ahead), else what the earlier one claimed.

        ``created``: the claim is made at once; otherwise it is pending until :meth:`create`
        (or the run queue) stores ``task_id``, or :meth:`confirm_message` says a follow-up to
        it is being delivered, and a pending claim that is never made lapses after a while (or
        goes by :meth:`release_message`).
        ``position``: the task's log position the message is accepted at. The default keeps
        no claims (every send is new): stores that deduplicate override all three methods.
        """
        return None

    @property
    def claims_on_create(self) -> bool:
        """Whether :meth:`create_claimed` makes a new task's claim in the create's own write
        (one round trip less per send: PostgreSQL); else the send claims first, then creates."""
        return type(self).create_claimed is not TaskStore.create_claimed

    async def create_claimed(self, task: Task, claim: NewClaim, *, owner: str = "") -> None:
        """Claim ``claim.message_id`` of ``owner`` for ``task`` (made, not pending) and store
        ``task`` at position 0, atomically: both or neither. Raises
        :class:`~.claims.AlreadyClaimed` (nothing stored) when an earlier send holds the
        claim, lapsed or not: the caller then takes :meth:`claim_message`'s path. Only a store
        whose :attr:`claims_on_create` is true implements it."""
        raise NotImplementedError("this store claims before it creates (claim_message)")

    async def reclaim_message(
        self, owner: str, message_id: str, old_task_id: str, new_task_id: str
    ) -> PriorSend | None:
        """Point the claim from ``old_task_id`` to the pending ``new_task_id`` (the message
        runs again), atomically: None when done, else the claim as it is now (``task_id`` ""
        if there is none any more)."""
        return None

    async def confirm_message(  # noqa: B027  # the default keeps no claims
        self, owner: str, message_id: str, task_id: str
    ) -> None:
        """Make the pending claim of a follow-up to ``task_id``: it is being delivered."""

    async def release_message(  # noqa: B027  # the default keeps no claims
        self, owner: str, message_id: str, task_id: str
    ) -> None:
        """Drop the claim if it is ``task_id``'s: the send it was made for did not happen."""

    async def aclose(self) -> None:  # noqa: B027  # optional hook
        """Release connections; the in-memory store has none."""

    @property
    def may_suspend(self) -> bool:
        """Whether ``create``, ``append``, ``get`` and the owner checks may wait (on I/O).

        True unless the store knows they never reach a checkpoint (the in-memory store). Then a
        caller may skip a shield or deadline that would only guard a wait in them: no
        cancellation can land where nothing waits. (A send skips its set-up shield, a run the
        one around recording its end; each such scope costs a request ~5-8 µs on trio.)
        """
        return True

    def process_leases(self) -> ProcessLeases | None:
        """The liveness lease a shared store keeps for this process's interactive runs
        (store/liveness.py); None: the store outlives no process, or recovers at its next
        start (SQLite)."""
        return None

    def push_watches(self) -> PushWatches | None:
        """Who watches each push config, when several processes share the store
        (store/push_watches.py); None: this process watches every config it was given, and a
        store that survives it resumes them at its next start (``pending_pushes``)."""
        return None

    def handover_transport(self) -> HandoverTransport | None:
        """How a follow-up reaching this process is handed to the process that holds its run
        (store/handover.py); None: every run of the store executes in this process."""
        return None

    def run_launcher(self) -> RunLauncher | None:
        """The durable queue a shared store offers for detached runs (None: run them locally).

        The Redis store returns its run queue, so detached runs survive the process that
        accepted them; the in-memory store has none.
        """
        return None
