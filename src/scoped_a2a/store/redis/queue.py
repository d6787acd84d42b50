"""The durable run queue: a Redis Stream of detached runs read by a consumer group of workers.

Producer side (a :class:`~scoped_a2a.store.launcher.RunLauncher`): :meth:`RunQueue.submit`
stores a new task and appends its run to the ``runs`` stream in one Lua script, so a send is
acknowledged only once both are in Redis. :meth:`RunQueue.cancel_elsewhere` publishes on the
``cancel`` channel, which every process's listener hands to the runners bound here.

Consumer side (a :class:`~scoped_a2a.store.launcher.DurableQueue`, used by the runtime's
``durable_worker.Worker``): XREADGROUP hands new entries to one worker;
XAUTOCLAIM hands entries idle for ``min_idle`` (their worker died or stalled) to another; a
per-run lease key (SET NX PX, renewed by the worker's heartbeat together with the entry's idle
time) makes sure a run executes in one place at a time; XACK + XDEL retire an entry once the
run's end is recorded (an entry whose run stopped without an end is redelivered). Each lease
taken counts one attempt on the task.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

import msgspec
from coredis.exceptions import StreamDuplicateConsumerGroupError

from ...protocol.ids import new_id
from ...protocol.types import Message, Task
from ..launcher import Job, RunRegistry
from . import scripts
from .connection import RedisConnection
from .consumers import DeadConsumers

log = logging.getLogger("scoped_a2a.redis.queue")

GROUP = "workers"
_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(Message).decode
_decode_meta = msgspec.json.Decoder(dict[str, Any] | None).decode


class QueueStore(Protocol):
    """What the queue needs of its store (:class:`.store.RedisTaskStore`).

    A Protocol rather than an import: the store creates its queue, so the queue sits below it.
    """

    def create_args(
        self, task: Task, op: str, owner: str = "", *, leased: bool = False
    ) -> tuple[list[str], list[Any]]:
        """Keys and arguments of the CREATE script for ``task`` (the queue adds its own);
        ``leased``: covered by this process's liveness lease (a queued run is not)."""

    def check_created(self, task_id: str, code: Any) -> None:
        """Raise for a CREATE that did not store the task (its id exists, its claim is lost)."""

    def prime(self, task_id: str, snapshot: bytes, position: int) -> Task:
        """Seed the store's cache with a snapshot just read; return a separate copy of it."""

    def fenced(self, task_id: str, token: str) -> AbstractContextManager[None]:
        """While in the body, this process's appends to ``task_id`` need its lease ``token``."""


class RunQueue:
    """The run queue of one store (and the launcher its app's runner uses)."""

    runs_elsewhere = True  # any worker process of the same Redis may take a run

    def __init__(self, conn: RedisConnection, store: QueueStore) -> None:
        self.conn = conn
        self.store = store
        self.key = conn.keys.runs
        self._create = conn.script(scripts.CREATE)
        self._claim = conn.script(scripts.CLAIM)
        self._renew = conn.script(scripts.RENEW)
        self._retire = conn.script(scripts.RETIRE)
        self._release = conn.script(scripts.RELEASE)
        self._runners: weakref.WeakSet[RunRegistry] = weakref.WeakSet()
        self.consumers = DeadConsumers(conn, self.key, GROUP)
        """Removes the consumer names of workers that died (:mod:`.consumers`)."""
        conn.cancel_handlers.append(self._on_cancel)

    # --- RunLauncher ----------------------------------------------------------------------

    def bind(self, runner: RunRegistry) -> None:
        self._runners.add(runner)

    def _on_cancel(self, task_id: str, reason: str) -> None:
        for runner in list(self._runners):
            run = runner.get(task_id)
            if run is not None:
                log.info("cancelling task %s at the request of another process (%s)", task_id,
                         reason)
                run.cancel(reason)

    async def submit(
        self,
        task: Task,
        message: Message,
        *,
        request_metadata: Mapping[str, Any] | None,
        detach_reason: str,
        owner: str = "",
    ) -> None:
        keys, args = self.store.create_args(task, new_id(), owner)
        keys.append(self.key)
        args += [_encode(message), _encode(request_metadata), detach_reason]
        self.store.check_created(task.id, await self.conn.run(self._create, keys, args))

    async def cancel_elsewhere(self, task_id: str) -> None:
        await self.conn.publish_cancel(task_id)

    # --- consumer side --------------------------------------------------------------------

    def fenced(self, task_id: str, token: str) -> AbstractContextManager[None]:
        """While in the body, this process's appends to ``task_id`` need its lease ``token``."""
        return self.store.fenced(task_id, token)

    async def prepare(self) -> None:
        """Create the consumer group (reading from the start of the stream) unless it exists."""
        async def create() -> None:
            with contextlib.suppress(StreamDuplicateConsumerGroupError):
                await self.conn.client.xgroup_create(self.key, GROUP, "0", mkstream=True)

        await self.conn.call(create)

    def _jobs(self, entries: Any) -> list[Job]:
        jobs = []
        for entry in entries or ():
            fields = entry.field_values
            try:
                jobs.append(Job(
                    entry.identifier, fields[b"task"].decode(), _decode_message(fields[b"msg"]),
                    _decode_meta(fields[b"meta"]), fields[b"why"].decode(),
                    fields.get(b"who", b"").decode(),
                ))
            except (KeyError, msgspec.DecodeError, UnicodeDecodeError):
                # Kept in the pending list for inspection; never executed.
                log.error("run queue entry %r is malformed; skipped", entry.identifier)
        return jobs

    async def read_new(self, consumer: str, count: int, block_ms: int) -> list[Job]:
        """Up to ``count`` entries no worker has had yet (waits up to ``block_ms`` for one)."""
        got = await self.conn.call(lambda: self.conn.client.xreadgroup(
            GROUP, consumer, {self.key: ">"}, count=count, block=block_ms))
        return self._jobs(next(iter(got.values()), ()) if got else ())

    async def reclaim(self, consumer: str, count: int, min_idle_ms: int) -> list[Job]:
        """Up to ``count`` entries whose worker has not renewed them for ``min_idle_ms``."""
        got = await self.conn.call(lambda: self.conn.client.xautoclaim(
            self.key, GROUP, consumer, min_idle_ms, "0-0", count=count))
        # After the claim: a dead worker's entries have just moved to a live one.
        await self.consumers.forget_dead()
        return self._jobs(got[1])

    async def claim(self, job: Job, token: str, lease_ms: int) -> tuple[int, Task | None]:
        """Take the run's lease: (attempt, the task), or (0, None) if the task ended, (-1,
        None) if it is gone, (-2, None) if another worker holds the lease."""
        keys = [self.conn.keys.task(job.task_id), self.conn.keys.lease(job.task_id)]
        reply = await self.conn.run(self._claim, keys, [token, lease_ms])
        attempt = int(reply[0])
        if attempt < 1:
            return attempt, None
        return attempt, self.store.prime(job.task_id, reply[1], int(reply[2]))

    async def renew(self, job: Job, consumer: str, token: str, lease_ms: int) -> int:
        """Extend the lease and the entry: 1 running, 0 the task ended, -1 the lease is lost."""
        keys = [self.conn.keys.lease(job.task_id), self.key, self.conn.keys.task(job.task_id)]
        args: list[Any] = [token, lease_ms, GROUP, consumer, job.entry_id]
        return int(await self.conn.run(self._renew, keys, args))

    async def retire(self, job: Job, token: str) -> bool:
        """Drop our lease; acknowledge the entry if its run's end is recorded (True)."""
        keys = [self.conn.keys.task(job.task_id), self.key, self.conn.keys.lease(job.task_id)]
        return bool(await self.conn.run(self._retire, keys, [GROUP, job.entry_id, token]) == 1)

    async def release(self, job: Job, token: str) -> None:
        """Drop our lease but keep the entry, so the run is redelivered after the idle time."""
        keys = [self.conn.keys.lease(job.task_id)]
        await self.conn.run(self._release, keys, [token])
