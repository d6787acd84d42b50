"""The SQLite store's durable run queue: a ``runs`` row per detached run not yet ended.

Producer side (:class:`~scoped_a2a.store.launcher.RunLauncher`): :meth:`SQLiteRunQueue.submit`
stores the new task and its ``runs`` row in one transaction, so a send is acknowledged only once
both are on disk, both or neither.

Consumer side (:class:`~scoped_a2a.store.launcher.DurableQueue`, read by the runtime's one
worker): one process owns the file, so the queue of runs ready to execute and their leases are
held in memory; only what must survive a crash is written: the row itself, and its ``attempts``
count, raised (and committed) each time a lease is taken, before the run starts. After a crash
every row is ready again, and its next lease says ``ctx.attempt`` > 1 if a run had started. A
run whose end is recorded retires its row; a run stopped without an end (shutdown, a lost
lease) keeps it, and is delivered again (at once, or at the next start).

Cancellation: ``submit`` and ``claim`` are writer ops (all or nothing); the rest is in memory.
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ...protocol.errors import ServerUnavailable, TaskNotFound
from ...protocol.types import Message, Task
from ..launcher import Job, RunRegistry
from ..records import copy_task
from .store import SQLiteTaskStore
from .writer import Work

if TYPE_CHECKING:
    import sqlite3

_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(Message).decode
_decode_meta = msgspec.json.Decoder(dict[str, Any] | None).decode


def job_of(row: tuple[str, bytes, bytes, str, str]) -> Job:
    """A ``runs`` row (task_id, message, meta, why, owner) as a Job."""
    task_id, message, meta, why, owner = row
    return Job(task_id.encode(), task_id, _decode_message(message), _decode_meta(meta), why,
               owner)


class SQLiteRunQueue:
    """The run queue of one SQLite store (and the launcher its app's runner uses)."""

    runs_elsewhere = False  # one process per file (its flock): every run executes here

    def __init__(self, store: SQLiteTaskStore) -> None:
        self.store = store
        self._ready: deque[Job] = deque()
        self._queued: set[str] = set()  # task ids in _ready
        self._arrived = anyio.Event()
        self._leases: dict[str, tuple[str, float]] = {}  # task id -> (token, valid until)
        # Jobs whose claim could not be stored (a locked or full file): the worker has let go
        # of them, so reclaim hands them out again once idle, as Redis redelivers an entry.
        self._stalled: dict[str, tuple[Job, float]] = {}
        self._runners: weakref.WeakSet[RunRegistry] = weakref.WeakSet()
        store.lease_of = self.lease_of

    def ready(self, job: Job) -> None:
        """Make ``job`` available to the worker (unless it already is)."""
        if job.task_id in self._queued:
            return
        self._queued.add(job.task_id)
        self._ready.append(job)
        self._arrived.set()

    def __len__(self) -> int:
        return len(self._ready)

    # --- RunLauncher -------------------------------------------------------------------------

    def bind(self, runner: RunRegistry) -> None:
        self._runners.add(runner)

    async def submit(self, task: Task, message: Message, *,
                     request_metadata: Mapping[str, Any] | None, detach_reason: str,
                     owner: str = "") -> None:
        meta = dict(request_metadata) if request_metadata is not None else None
        row = (task.id, _encode(message), _encode(meta), detach_reason, owner)
        job = Job(task.id.encode(), task.id, message, meta, detach_reason, owner)

        def extra(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO runs (task_id, message, meta, why, owner) "
                         "VALUES (?, ?, ?, ?, ?)", row)

        await self.store.write(self.store.create_work(task, owner, extra,
                                                      lambda: self.ready(job)))

    async def cancel_elsewhere(self, task_id: str) -> None:
        """Nothing to do: every run of this file executes in this process."""

    # --- DurableQueue ------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Nothing to prepare: the rows were loaded when the file was opened."""

    async def read_new(self, consumer: str, count: int, block_ms: int) -> list[Job]:
        if not self._ready:
            with anyio.move_on_after(block_ms / 1000):
                await self._arrived.wait()
        out: list[Job] = []
        while self._ready and len(out) < count:
            job = self._ready.popleft()
            self._queued.discard(job.task_id)
            out.append(job)
        if not self._ready:
            self._arrived = anyio.Event()
        return out

    async def reclaim(self, consumer: str, count: int, min_idle_ms: int) -> list[Job]:
        """The jobs whose claim failed at least ``min_idle_ms`` ago (leases live in this
        process, and a run that lost one is made ready again when its worker lets go of it,
        ``retire``/``release``; a failed claim has no worker left to do so)."""
        await anyio.lowlevel.checkpoint()
        since = time.monotonic() - min_idle_ms / 1000
        out: list[Job] = []
        for task_id, (job, failed_at) in list(self._stalled.items()):
            if len(out) >= count:
                break
            if failed_at <= since:
                del self._stalled[task_id]
                out.append(job)
        return out

    async def claim(self, job: Job, token: str, lease_ms: int) -> tuple[int, Task | None]:
        store = self.store
        rec = store.live.get(job.task_id)
        if rec is None:
            try:
                await store.get(job.task_id)
            except TaskNotFound:
                return -1, None
            return 0, None  # ended (e.g. canceled while queued)
        held = self._leases.get(job.task_id)
        if held is not None and held[0] != token and held[1] > time.monotonic():
            return -2, None

        def run(conn: sqlite3.Connection) -> int:
            got = conn.execute("UPDATE runs SET attempts = attempts + 1 WHERE task_id = ? "
                               "RETURNING attempts", (job.task_id,)).fetchone()
            return int(got[0]) if got is not None else -1

        try:
            attempt: int = await store.writer.write(Work(run))
        except ServerUnavailable:
            self._stalled[job.task_id] = (job, time.monotonic())
            raise
        if attempt < 1:
            return -1, None
        self._leases[job.task_id] = (token, time.monotonic() + lease_ms / 1000)
        # A new attempt starts from what is committed: events an earlier attempt lost in a
        # failed commit are not this run's to answer for.
        rec.poisoned = rec.lost = None
        return attempt, copy_task(rec.view)

    async def renew(self, job: Job, consumer: str, token: str, lease_ms: int) -> int:
        await anyio.lowlevel.checkpoint()
        held = self._leases.get(job.task_id)
        if held is None or held[0] != token:
            return -1
        if job.task_id not in self.store.live:
            return 0
        self._leases[job.task_id] = (token, time.monotonic() + lease_ms / 1000)
        return 1

    async def retire(self, job: Job, token: str) -> bool:
        self._drop_lease(job.task_id, token)
        if job.task_id in self.store.live:
            self.ready(job)  # stopped without an end: deliver it again
            return False
        await self.store.writer.write(Work(lambda c: c.execute(
            "DELETE FROM runs WHERE task_id = ?", (job.task_id,))))
        return True

    async def release(self, job: Job, token: str) -> None:
        await anyio.lowlevel.checkpoint()
        self._drop_lease(job.task_id, token)
        self.ready(job)

    def _drop_lease(self, task_id: str, token: str) -> None:
        held = self._leases.get(task_id)
        if held is not None and held[0] == token:
            del self._leases[task_id]

    def lease_of(self, task_id: str) -> str | None:
        """The token of the lease held on ``task_id``'s run, if any (appends check it)."""
        held = self._leases.get(task_id)
        return held[0] if held is not None else None

    def fenced(self, task_id: str, token: str) -> AbstractContextManager[None]:
        return self.store.fenced(task_id, token)
