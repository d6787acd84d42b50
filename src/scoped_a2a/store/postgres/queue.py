"""The durable run queue in PostgreSQL: one ``runs`` row per detached run not yet retired.

Producer side (a :class:`~scoped_a2a.store.launcher.RunLauncher`): :meth:`PostgresRunQueue.submit`
stores the new task and its run in one transaction (then ``NOTIFY <schema>_queued``), so a send
is acknowledged only once both are committed. :meth:`cancel_elsewhere` notifies
``<schema>_cancel`` with the task id sealed (:mod:`.sealed`: any role of the database may
NOTIFY, and an order to stop a run must come from a replica); every process's listener hands
it to :meth:`PostgresRunQueue.on_cancel`, which drops what does not open and cancels the run
of the task named if a runner bound here holds it.

Consumer side (a :class:`~scoped_a2a.store.launcher.DurableQueue`, used by
``runtime.durable_worker.Worker``): :meth:`read_new` hands rows no worker has had to one worker
(``FOR UPDATE SKIP LOCKED``: two workers never get the same row); :meth:`reclaim` hands on rows
whose worker has been silent for ``min_idle`` (it died, or lost the database); :meth:`claim`
takes the run's lease (token and expiry in the row, one attempt counted), so a run executes in
one place at a time, and appends of the run (``fenced``) check the token in their transaction;
:meth:`retire` deletes the row once the run's end is recorded. All times are the database's.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import anyio
import msgspec

from ...protocol.types import Message, Task, TaskState
from ..launcher import Job, RunRegistry
from ..liveness import cancel_reason
from .connection import Conn
from .core import load_snapshot
from .schema import NOW
from .sealed import SealedChannel
from .store import PostgresTaskStore

log = logging.getLogger("scoped_a2a.postgres.queue")
_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(Message).decode
_decode_meta = msgspec.json.Decoder(dict[str, Any] | None).decode
_COLUMNS = "seq, task_id, message, meta, why, owner"


def _job(row: Any) -> Job:
    seq, task_id, message, meta, why, owner = row
    return Job(str(seq).encode(), task_id, _decode_message(bytes(message)),
               _decode_meta(bytes(meta)), why, owner)


class PostgresRunQueue:
    """Detached runs queued in the store's schema, executed by workers on any replica."""

    runs_elsewhere = True

    def __init__(self, store: PostgresTaskStore, cancels: SealedChannel) -> None:
        self.store = store
        self.cancels = cancels
        """Seals and opens the cancel channel's payloads (shared with the liveness leases)."""
        self.pool = store.pool
        self.waiters = store.waiters
        self.queued_channel = f"{self.pool.schema}_queued"
        self.cancel_channel = f"{self.pool.schema}_cancel"
        self._runners: weakref.WeakSet[RunRegistry] = weakref.WeakSet()

    # --- RunLauncher ----------------------------------------------------------------------

    def bind(self, runner: RunRegistry) -> None:
        self._runners.add(runner)

    def on_cancel(self, payload: str) -> None:
        """A cancel request from another process (the listener's ``cancel`` channel): the
        task id, sealed. One that does not open is dropped (logged)."""
        opened = self.cancels.unwrap(payload)
        if opened is None:
            return
        task_id, reason = cancel_reason(opened.decode(errors="replace"))
        for runner in list(self._runners):
            run = runner.get(task_id)
            if run is not None:
                log.info("cancelling task %s at the request of another process (%s)", task_id,
                         reason)
                run.cancel(reason)

    async def submit(self, task: Task, message: Message, *,
                     request_metadata: Mapping[str, Any] | None, detach_reason: str,
                     owner: str = "") -> None:
        meta = dict(request_metadata) if request_metadata is not None else None
        snap = _encode(task)
        row = (task.id, _encode(message), _encode(meta), detach_reason, owner)

        async def run(conn: Conn) -> None:
            await self.store.create_sql(
                conn, task, owner, snap, also=", r AS (INSERT INTO runs (task_id, message, "
                "meta, why, owner) VALUES (%s, %s, %s, %s, %s)) SELECT pg_notify(%s, '')",
                also_args=(*row, self.queued_channel))

        await self.pool.run(run, transaction=False)  # one statement: its own transaction
        self.store.created(task, snap)
        self.waiters.wake_queue()

    async def cancel_elsewhere(self, task_id: str) -> None:
        payload = self.cancels.wrap(task_id.encode())
        await self.pool.run(lambda c: c.execute("SELECT pg_notify(%s, %s)",
                                                (self.cancel_channel, payload)))

    # --- DurableQueue ---------------------------------------------------------------------

    async def prepare(self) -> None:
        """Nothing to prepare: the table exists once the store is open."""

    async def _take(self, consumer: str, count: int, where: str, args: tuple[Any, ...]
                    ) -> list[Job]:
        rows = await self.pool.run(lambda c: c.all(
            f"UPDATE runs SET consumer = %s, touched = {NOW} WHERE seq IN (SELECT seq FROM "
            f"runs WHERE {where} ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED) "
            f"RETURNING {_COLUMNS}", (consumer, *args, count)))
        return [_job(r) for r in sorted(rows)]

    async def read_new(self, consumer: str, count: int, block_ms: int) -> list[Job]:
        ready = self.waiters.next_queued()
        jobs = await self._take(consumer, count, "consumer IS NULL", ())
        if jobs:
            return jobs
        with anyio.move_on_after(block_ms / 1000):
            await ready.wait()
        return await self._take(consumer, count, "consumer IS NULL", ())

    async def reclaim(self, consumer: str, count: int, min_idle_ms: int) -> list[Job]:
        return await self._take(consumer, count,
                                f"consumer IS NOT NULL AND touched < {NOW} - %s",
                                (min_idle_ms / 1000,))

    async def claim(self, job: Job, token: str, lease_ms: int) -> tuple[int, Task | None]:
        async def run(conn: Conn) -> tuple[int, bytes | None]:
            task = await conn.one("SELECT state, snap, seq, snap_pos, last FROM tasks "
                                "WHERE id = %s", (job.task_id,))
            if task is None:
                return -1, None
            if TaskState(task[0]).terminal:
                return 0, None  # ended (e.g. canceled while queued)
            got = await conn.one(
                f"UPDATE runs SET attempts = attempts + 1, token = %s, lease_until = {NOW} + %s, "
                f"touched = {NOW} WHERE task_id = %s AND (token IS NULL OR token = %s OR "
                f"lease_until < {NOW}) RETURNING attempts",
                (token, lease_ms / 1000, job.task_id, token))
            if got is None:
                held = await conn.one("SELECT 1 FROM runs WHERE task_id = %s",
                                    (job.task_id,))
                return (-2 if held is not None else -1), None
            return int(got[0]), await load_snapshot(conn, task[2], task[1], task[3], task[4])

        attempt, snap = await self.pool.run(run)
        if snap is None:
            return attempt, None
        return attempt, msgspec.json.decode(snap, type=Task)

    async def renew(self, job: Job, consumer: str, token: str, lease_ms: int) -> int:
        async def run(conn: Conn) -> int:
            got = await conn.one(
                f"UPDATE runs SET lease_until = {NOW} + %s, touched = {NOW}, consumer = %s "
                "WHERE task_id = %s AND token = %s RETURNING 1",
                (lease_ms / 1000, consumer, job.task_id, token))
            if got is None:
                return -1
            state = await conn.one("SELECT state FROM tasks WHERE id = %s",
                                 (job.task_id,))
            return 0 if state is None or TaskState(state[0]).terminal else 1

        return int(await self.pool.run(run))

    async def retire(self, job: Job, token: str) -> bool:
        async def run(conn: Conn) -> bool:
            state = await conn.one("SELECT state FROM tasks WHERE id = %s",
                                 (job.task_id,))
            if state is None or TaskState(state[0]).terminal:
                await conn.execute("DELETE FROM runs WHERE task_id = %s AND "
                             "(token IS NULL OR token = %s OR lease_until < " + NOW + ")",
                             (job.task_id, token))
                return True
            # Stopped without an end: deliver it again (to any worker) at once.
            await conn.execute("UPDATE runs SET token = NULL, lease_until = NULL, consumer = NULL "
                         "WHERE task_id = %s AND token = %s", (job.task_id, token))
            await conn.execute("SELECT pg_notify(%s, '')", (self.queued_channel,))
            return False

        return bool(await self.pool.run(run))

    async def release(self, job: Job, token: str) -> None:
        await self.pool.run(lambda c: c.execute(
            "UPDATE runs SET token = NULL, lease_until = NULL, consumer = NULL "
            "WHERE task_id = %s AND (token IS NULL OR token = %s)", (job.task_id, token)))

    def fenced(self, task_id: str, token: str) -> AbstractContextManager[None]:
        return self.store.fenced(task_id, token)
