"""The Redis task store: task snapshots, each task's event log as a Redis Stream, push configs.

Layout (see :class:`.connection.Keys`): a hash per task (the 1.0 JSON snapshot, its position,
state, context, timestamp, creation order, attempts), a stream per task whose entry ids are
``<position>-0`` (so positions are the same per-task integers as in memory, and "after N" is
the stream range after ``N-0``), and a hash of push configs per task.

Rules. Every append is checked by one Lua script (:data:`.scripts.APPEND`, run in a batch:
:mod:`.batch`) that refuses events for a terminal task, so terminal states never change whoever
writes; the snapshot is folded in Python with :func:`..snapshot.apply_event` and written only
if the position did not move meanwhile (compare-and-set). Appends are :mod:`.writer`'s: the
end of a turn is waited for, a run's other events are pushed (stored in order, shown once
stored). A run executing under a lease (a queued run) writes only while it
holds the lease, so a worker that lost its run to another cannot write to the log.

Retention. Each log keeps at most ``max_events_per_task`` events (exact MAXLEN trimming; the
snapshot still reflects all). An ended task expires after ``ended_ttl`` seconds, and at most
``max_ended_tasks`` ended tasks are kept (oldest-ended evicted first). Running tasks never expire.

Reading and waiting are :mod:`.reader`'s: :meth:`wait` sleeps on a local event woken by this
process's appends and by the ``appended`` channel (other processes' appends), re-checking every
``poll_interval`` seconds; reads and waits ask Redis nothing that this process already knows
(:mod:`.local`).

Cancellation: every method is safe to cancel; an append either happened or not (retried appends
are recognised by their op id). Errors: ServerUnavailable when Redis is unreachable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import msgspec

from ...protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from ...protocol.ids import new_id
from ...protocol.trajectory import LogEvent
from ...protocol.types import (
    ListTasksRequest,
    Task,
    TaskPushNotificationConfig,
)
from ..base import LogPage, TaskPage, TaskStore, page_bounds
from ..claims import DEFAULT_CLAIM_WINDOW, PriorSend
from ..handover import HandoverTransport
from ..launcher import RunLauncher
from ..liveness import DEFAULT_LEASE, ProcessLeases
from ..push_watches import PushWatches
from ..records import decode_task
from . import scripts
from .claims import RedisClaims
from .connection import RedisConnection
from .handover import RedisHandover
from .leases import RedisLeases
from .push_watches import RedisPushWatches
from .queue import RunQueue
from .reader import LogReader
from .writer import LogWriter

_encode = msgspec.json.Encoder().encode
_decode_push = msgspec.json.Decoder(TaskPushNotificationConfig).decode

class RedisTaskStore(TaskStore):
    """Tasks in Redis, shared by every server and worker process using the same prefix."""

    def __init__(
        self,
        conn: RedisConnection,
        *,
        max_events_per_task: int = 10_000,
        max_ended_tasks: int = 10_000,
        ended_ttl: float = 7 * 86400.0,
        poll_interval: float = 5.0,
        durable_runs: bool = True,
        claim_window: float = DEFAULT_CLAIM_WINDOW,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        if max_events_per_task < 1 or max_ended_tasks < 1 or ended_ttl <= 0:
            raise ValueError("store bounds must be positive")
        if claim_window < 0:
            raise ValueError("the claim window must not be negative")
        # An ended task's message claims expire with it, or after the window if that is longer
        # (eviction by max_ended_tasks leaves them to their expiry).
        self.claim_keep_ms = int(max(ended_ttl, claim_window) * 1000)
        self.conn = conn
        self.keys = conn.keys
        self.max_events_per_task = max_events_per_task
        self.max_ended_tasks = max_ended_tasks
        self.ended_ttl = ended_ttl
        self.poll_interval = poll_interval
        self.queue = RunQueue(conn, self)
        """The durable run queue; workers consume it (``runtime.durable_worker.Worker``)."""
        self.durable_runs = durable_runs
        self._create = conn.script(scripts.CREATE)
        self._push_set = conn.script(scripts.PUSH_SET)
        self._push_list = conn.script(scripts.PUSH_LIST)
        self._push_delete = conn.script(scripts.PUSH_DELETE)
        self.leases = RedisLeases(conn, lease)
        """This process's liveness lease over its interactive runs (store/liveness.py)."""
        self.watches = RedisPushWatches(conn, self.leases)
        """Who watches each push config (store/push_watches.py)."""
        self.handover = RedisHandover(conn)
        """Carries follow-ups to the process holding their run (store/handover.py)."""
        self.claims = RedisClaims(conn, self.claim_keep_ms)
        """The message claims (docs/exactly-once.md)."""
        self.writer = LogWriter(self)
        """The append path: folds, batches, pushes (:mod:`.writer`)."""
        self.reader = LogReader(self)
        """The read path: pages of a log, waits for new entries (:mod:`.reader`)."""
        self.local = conn.local

    def run_launcher(self) -> RunLauncher | None:
        """The run queue: detached runs are queued durably and executed by any worker."""
        return self.queue if self.durable_runs else None

    def push_watches(self) -> PushWatches | None:
        """Push watches handed between this store's processes (:mod:`.push_watches`)."""
        return self.watches

    def handover_transport(self) -> HandoverTransport | None:
        """Pub/sub channels between the processes of this Redis (:mod:`.handover`)."""
        return self.handover

    def process_leases(self) -> ProcessLeases | None:
        """This process's liveness lease (its opener keeps it alive: ``open_redis_store``)."""
        return self.leases

    # --- fencing (used by workers) --------------------------------------------------------

    @contextmanager
    def fenced(self, task_id: str, token: str) -> Iterator[None]:
        """While in the body, this process's appends to ``task_id`` need its lease ``token``.

        An append without the lease (another worker took the run over) raises TaskEnded, so
        the stale run stops at its next write and records nothing.
        """
        self.writer.fences[task_id] = token
        try:
            yield
        finally:
            self.writer.fences.pop(task_id, None)

    # --- tasks ----------------------------------------------------------------------------

    def create_args(
        self, task: Task, op: str, owner: str = "", *, leased: bool = False
    ) -> tuple[list[str], list[Any]]:
        """Keys and arguments of the CREATE script for ``task`` (the run queue adds its own).

        ``leased``: the task's run executes here, covered by this process's liveness lease."""
        keys = [self.keys.task(task.id), self.keys.tasks, self.keys.seq]
        args: list[Any] = [
            task.id, _encode(task), task.status.state.value, task.context_id,
            task.status.timestamp or "", op, owner, self.claims.take_pending(task.id),
            self.keys.claims(task.id), self.leases.runs_key if leased else "",
        ]
        return keys, args

    def check_created(self, task_id: str, code: Any) -> None:
        """Raise for a CREATE that did not store the task (its id exists, its claim is lost)."""
        if code == -5:
            raise ServerUnavailable(
                "another send of the same message took over while this one was being set up; "
                "send it again to get its task")
        if code != 1:
            raise InvalidParams(f"task {task_id!r} already exists")

    async def create(self, task: Task, *, owner: str = "") -> None:
        # Not subscribed to here: a blocking send is answered by its run, not the log; a
        # reader that waits subscribes then (one check of the position, then none: .local).
        # Its run executes here (queued runs are stored by the queue's submit): this
        # process's liveness lease covers it until it ends (store/liveness.py).
        keys, args = self.create_args(task, new_id(), owner, leased=True)
        tick = self.conn.tick()
        self.check_created(task.id, await self.conn.run(self._create, keys, args))
        self.local.snapshot_is(task.id, args[1], 0)
        self.local.saw(task.id, 0, tick)
        # Its runner appends next: a copy of its own to fold into spares that append a read.
        self.writer.remember(task.id, decode_task(args[1]), 0)

    async def get(self, task_id: str) -> tuple[Task, int]:
        raw = await self.conn.call(
            lambda: self.conn.client.hmget(self.keys.task(task_id), ["snap", "last"])
        )
        if raw[0] is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return decode_task(raw[0]), int(raw[1] or 0)

    async def owner_of(self, task_id: str) -> str:
        # The owner is a field of the task's hash, written with it by CREATE: every replica
        # reads the same answer. A task stored before owners existed has none: anonymous.
        state, owner = await self.conn.call(
            lambda: self.conn.client.hmget(self.keys.task(task_id), ["state", "owner"])
        )
        if state is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return bytes(owner or b"").decode()

    async def append(self, task_id: str, event: LogEvent) -> int:
        return await self.writer.append(task_id, event)

    def ended_json(self, task_id: str) -> bytes | None:
        """The ended snapshot of ``task_id`` if this process recorded its end (recently):
        a terminal task refuses every write, so it is what Redis holds (a blocking send's
        answer needs no read)."""
        return self.writer.ended.get(task_id)

    def prime(self, task_id: str, snapshot: bytes, position: int) -> Task:
        """Seed the writer's cache with a snapshot just read; return a separate copy of it."""
        self.writer.remember(task_id, decode_task(snapshot), position)
        return decode_task(snapshot)

    async def read(
        self, task_id: str, after: int, *, max_events: int = 1000, max_bytes: int = 1 << 20
    ) -> LogPage:
        return await self.reader.read(task_id, after, max_events=max_events, max_bytes=max_bytes)

    async def wait(self, task_id: str, after: int) -> None:
        await self.reader.wait(task_id, after)

    async def list_tasks(self, request: ListTasksRequest, *, owner: str | None = None) -> TaskPage:
        size, before = page_bounds(request)
        client = self.conn.client
        ids = await self.conn.call(
            lambda: client.zrange(self.keys.tasks, 0, -1, rev=True, withscores=True)
        )
        matched: list[tuple[str, int]] = []
        gone: list[str] = []
        batch = 500
        for i in range(0, len(ids), batch):
            chunk = ids[i:i + batch]

            async def fields(chunk: Any = chunk) -> list[Any]:
                async with client.pipeline(transaction=False) as pipe:
                    reqs = [pipe.hmget(self.keys.task(m.decode()),
                                       ["ctx", "state", "ts", "owner"])
                            for m, _ in chunk]
                return [await r for r in reqs]

            for (member, score), (ctx, state, ts, who) in zip(
                chunk, await self.conn.call(fields), strict=True
            ):
                task_id = member.decode() if isinstance(member, bytes) else member
                if state is None:
                    gone.append(task_id)  # expired: forget it below
                    continue
                if owner is not None and bytes(who or b"").decode() != owner:
                    continue
                if request.context_id is not None and ctx.decode() != request.context_id:
                    continue
                if request.status is not None and state.decode() != request.status.value:
                    continue
                if (request.status_timestamp_after is not None
                        and (ts or b"").decode() < request.status_timestamp_after):
                    continue
                matched.append((task_id, int(score)))
        if gone:
            await self.conn.call(lambda: client.zrem(self.keys.tasks, gone))
        page = [(t, s) for t, s in matched if before is None or s < before][:size]
        tasks: list[Task] = []
        for task_id, _ in page:
            try:
                tasks.append((await self.get(task_id))[0])
            except TaskNotFound:
                continue  # expired between the two reads
        more = bool(page) and matched[-1][1] < page[-1][1]
        token = str(page[-1][1]) if more else ""
        return TaskPage(tasks, token, len(matched), size)

    # --- message claims (docs/exactly-once.md) -------------------------------------------

    async def claim_message(
        self, owner: str, message_id: str, fingerprint: bytes, task_id: str, *,
        position: int = 0, created: bool = False,
    ) -> PriorSend | None:
        return await self.claims.claim(owner, message_id, fingerprint, task_id, position, created)

    async def reclaim_message(
        self, owner: str, message_id: str, old_task_id: str, new_task_id: str
    ) -> PriorSend | None:
        return await self.claims.reclaim(owner, message_id, old_task_id, new_task_id)

    async def confirm_message(self, owner: str, message_id: str, task_id: str) -> None:
        await self.claims.confirm(owner, message_id, task_id)

    async def release_message(self, owner: str, message_id: str, task_id: str) -> None:
        await self.claims.release(owner, message_id, task_id)

    # --- push configs ---------------------------------------------------------------------

    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        assert config.id is not None
        keys = [self.keys.task(task_id), self.keys.push(task_id)]
        ok = await self.conn.run(self._push_set, keys, [config.id, _encode(config)])
        if ok != 1:
            raise TaskNotFound(f"task {task_id!r} not found")

    async def push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]:
        keys = [self.keys.task(task_id), self.keys.push(task_id)]
        raw = await self.conn.run(self._push_list, keys, [])
        if raw is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return [_decode_push(v) for v in cast("list[bytes]", raw)]

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        keys = [self.keys.task(task_id), self.keys.push(task_id)]
        n = await self.conn.run(self._push_delete, keys, [config_id])
        if n == -1:
            raise TaskNotFound(f"task {task_id!r} not found")
        return bool(n == 1)
