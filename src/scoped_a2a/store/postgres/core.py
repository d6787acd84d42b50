"""The PostgreSQL task store's core: tasks, their snapshots and appends (store.py adds reads,
ListTasks, claims and push configs; retention.py sweeps ended tasks).

Nothing is kept in this process that another replica could change, except caches checked
against the database, and the positions of the runs this process holds (appends.py).

Appends. A running task's events are batched, many tasks per statement (appends.py, which
says what is waited for, and how a due snapshot goes with the batch). A task's end and what
the batch skipped take the full path: one statement when this process holds the snapshot
at the task's last position (it writes only if the row is still there:
:data:`.appends.KNOWN`), else a transaction that
locks the row first (``SELECT ... FOR UPDATE``); either way appends to one task from any
replica are serialized and positions are the same per-task integers as in memory. A
terminal task refuses the event (:class:`TaskEnded`: terminal states never change), and a run
executing under a queue lease (``fenced``) writes only while the ``runs`` row still holds its
token. The event row, the new snapshot and a ``NOTIFY`` commit together.

Durability. A create, a claim, a queued run and a task's end commit synchronously (the WAL is
on the server's disk before the caller is answered). A running task's other events commit with
``synchronous_commit = off`` unless ``sync_events``: they are visible at once and reach the
disk within ~3 × ``wal_writer_delay`` (600 ms by default); a crash of the PostgreSQL server (not
of this process) in that window can lose them, and a reader may have seen them (docs/postgres.md
says what that means). Each synchronous commit costs a WAL flush (5 ms on this machine's disk).

Snapshots. The row keeps the task's 1.0 JSON as of ``snap_pos``, written every SNAP_EVERY
events and at the end; whoever reads it folds the status and artifact events after it
(:func:`load_snapshot`). The writer folds the events into the snapshot it last saw
(:func:`..snapshot.folded` in a batch, :func:`..snapshot.applied` on the full path: no deep
copy), and reads the stored one only if the position moved meanwhile; readers skip the
snapshot's bytes when theirs is current.

Cancellation: every method is safe to cancel (connection.py). Errors: ServerUnavailable (one
line) when the database cannot be used.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
from psycopg import errors as pgerrors

from ...protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from ...protocol.trajectory import LogEvent, TrajectoryEvent
from ...protocol.types import (
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from ..base import LogEntry, TaskEnded, TaskStore
from ..claims import AlreadyClaimed, NewClaim, claim_key
from ..handover import HandoverTransport
from ..process_leases import DEFAULT_LEASE, ProcessLeases
from ..push_watches import PushWatches
from ..records import DECODERS, KIND_OF, TRAJECTORY, decode_task
from ..retention import Retention
from ..sealing import Sealer
from ..snapshot import applied, apply_event
from .appends import WRITE, Batcher, full_update
from .connection import Conn, OutcomeUnknown, Pool
from .group_commit import GroupCommit
from .grouped import Create, End, create_many, create_one, end_many, end_one, known, known_args
from .handover import PostgresHandover
from .leases import PostgresLeases
from .listener import Waiters
from .local import LocalState
from .push_watches import PostgresPushWatches
from .unstarted import Unstarted

log = logging.getLogger("scoped_a2a.postgres")
_encode = msgspec.json.Encoder().encode
_decode_push = msgspec.json.Decoder(TaskPushNotificationConfig).decode
_TERMINAL = [s.value for s in TaskState if s.terminal]


SNAP_EVERY = 64
"""A running task's snapshot is written every this many events (and at its end); readers fold
the status and artifact events after it. Writing it at every event would cost a stream of
artifact chunks bytes quadratic in its length."""


async def load_snapshot(conn: Conn, seq: int, snap: bytes, snap_pos: int,
                  last: int) -> bytes:
    """The task's JSON snapshot as of ``last``: ``snap`` (as of ``snap_pos``) with the status
    and artifact events after it folded in. Blocking: in the caller's transaction."""
    if snap_pos >= last:
        return bytes(snap)
    rows = await conn.all("SELECT kind, body FROM events WHERE task = %s AND pos > %s "
                        "AND pos <= %s AND kind <> %s ORDER BY pos",
                        (seq, snap_pos, last, TRAJECTORY))
    task = decode_task(snap)
    for kind, body in rows:
        apply_event(task, DECODERS[kind].decode(body))
    return _encode(task)


class _Ended(Exception):
    """Raised inside a transaction: the task is terminal, or the run lost its lease."""


class PostgresCore(LocalState, TaskStore):
    """Tasks, snapshots and appends in one PostgreSQL schema (:class:`.store.PostgresTaskStore`
    is the whole store)."""

    def __init__(self, pool: Pool, waiters: Waiters, sealer: Sealer, *,
                 max_events_per_task: int = 10_000, policy: Retention | None = None,
                 poll_interval: float = 5.0, sync_events: bool = False,
                 lease: float = DEFAULT_LEASE, handover: Sealer | None = None) -> None:
        if max_events_per_task < 1:
            raise ValueError("store bounds must be positive")
        self.pool = pool
        self.waiters = waiters
        self.sealer = sealer
        self.max_events_per_task = max_events_per_task
        self.policy = policy or Retention()
        self.poll_interval = poll_interval
        self.sync_events = sync_events
        self.channel = f"{pool.schema}_appended"
        LocalState.__init__(self)
        self._fences: dict[str, str] = {}
        self._next_sweep = 0.0
        self.queue: Any = None  # the run queue (queue.py), set by open_postgres_store
        self.leases = PostgresLeases(pool, lease)
        """This process's liveness lease over its interactive runs (store/liveness.py)."""
        self.watches = PostgresPushWatches(pool, self.leases)
        """Who watches each push config (store/push_watches.py)."""
        self.batcher = Batcher(pool, self.channel, max_events_per_task,
                               min(SNAP_EVERY, max_events_per_task), sync_events,
                               self._committed, self._fold, self.get)
        """Intermediate events, many tasks per statement (appends.py)."""
        self.handover = PostgresHandover(pool, self.leases.process_id,
                                         handover or sealer)
        """Carries follow-ups to the process holding their run (store/handover.py)."""
        self.unstarted = Unstarted(self, pool, self.leases.process_id)
        """Interactive creates whose commit was lost, settled (:mod:`.unstarted`)."""
        self.creates = GroupCommit(pool, create_one, create_many)
        self.ends = GroupCommit(pool, end_one, end_many)
        """Concurrent creates (with claims) and ends, many per statement (group_commit.py)."""

    def process_leases(self) -> ProcessLeases | None:
        """This process's liveness lease (its opener keeps it alive: ``open_postgres_store``)."""
        return self.leases

    def push_watches(self) -> PushWatches | None:
        """Push watches handed between this store's processes (:mod:`.push_watches`)."""
        return self.watches

    def handover_transport(self) -> HandoverTransport | None:
        """LISTEN/NOTIFY between the processes of this schema (:mod:`.handover`)."""
        return self.handover

    def run_launcher(self) -> Any:
        """The run queue: detached runs are stored with their task and run by any worker."""
        return self.queue

    # --- tasks ----------------------------------------------------------------------------

    async def create_sql(self, conn: Conn, task: Task, owner: str, snap: bytes,
                         process: str | None = None, also: str = "",
                         also_args: tuple[Any, ...] = ()) -> None:
        """Store ``task`` and make its pending claims, in one statement (one round trip, its
        own transaction); ``also``: more of the statement (``, name AS (...)`` CTEs, then
        ``SELECT ...``; the run queue adds its row and notification), with ``also_args``.
        ``process``: the process whose liveness lease covers its run (leases.py)."""
        try:
            await conn.execute(
                "WITH t AS (INSERT INTO tasks (id, owner, context_id, state, ts, last, snap, "
                "ended_at, size, process) VALUES (%s, %s, %s, %s, %s, 0, %s, NULL, %s, %s)), "
                "c AS (UPDATE claims SET pending_until = NULL WHERE task_id = %s "
                "AND pending_until IS NOT NULL)" + (also or " SELECT 1"),
                (task.id, owner, task.context_id, task.status.state.value,
                 task.status.timestamp, snap, len(snap), process, task.id, *also_args))
        except pgerrors.UniqueViolation:
            raise InvalidParams(f"task {task.id!r} already exists") from None

    def created(self, task: Task, snap: bytes) -> None:
        """``task`` was committed: its writer and readers here start from this snapshot."""
        self._remember(task.id, decode_task(snap), 0)

    async def create(self, task: Task, *, owner: str = "") -> None:
        snap = _encode(task)
        process = self.leases.process_id

        async def write(conn: Conn) -> bool:
            await self.create_sql(conn, task, owner, snap, process)
            return True

        await self._create_here(task, snap, write)

    async def create_claimed(self, task: Task, claim: NewClaim, *, owner: str = "") -> None:
        """The claim and the task in one statement, shared with concurrent creates (one
        synchronous commit: the claim is made with its task, never pending; group_commit.py).
        AlreadyClaimed: the key is held (or lapsed: claims.claim deletes those), nothing
        stored."""
        snap = _encode(task)
        item = Create(claim_key(owner, claim.message_id), claim.fingerprint, task.id, owner,
                      task.context_id, task.status.state.value, task.status.timestamp, snap,
                      self.leases.process_id)

        async def alone(conn: Conn) -> bool:  # its statement failed: its own error, alone
            try:
                return await create_one(conn, item)
            except pgerrors.UniqueViolation:
                raise InvalidParams(f"task {task.id!r} already exists") from None

        if not await self._create_here(task, snap, alone, self.creates.submit(item)):
            raise AlreadyClaimed(claim.message_id)

    async def _create_here(self, task: Task, snap: bytes,
                           write: Callable[[Conn], Awaitable[bool]],
                           grouped: Awaitable[bool | None] | None = None) -> bool:
        """Run ``write``, a create of ``task`` committing by itself (False: it stored
        nothing), or ``grouped`` first (None: ``write`` then). Its run executes in this
        process, whose liveness lease covers it until its end is appended
        (store/liveness.py); a commit whose outcome is unknown is settled by
        :mod:`.unstarted`."""
        try:
            done = None if grouped is None else await grouped
            if done is None:
                done = await self.pool.run(write, transaction=False)
        except OutcomeUnknown:
            self.unstarted.add(task.id)  # perhaps stored, never run: settled (unstarted.py)
            raise
        if done:
            self.created(task, snap)
            self.batcher.own(task.id, 0)  # its run is this process's
        return done

    async def owner_of(self, task_id: str) -> str:
        row = await self.pool.run(lambda c: c.one(
            "SELECT owner FROM tasks WHERE id = %s", (task_id,)), retry=True)
        if row is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return str(row[0])

    async def get(self, task_id: str) -> tuple[Task, int]:
        held = self._held(task_id)
        async def run(conn: Conn) -> tuple[int, bytes | None] | None:
            row = await conn.one(
                "SELECT seq, last, snap_pos, CASE WHEN last = %s THEN NULL ELSE snap END "
                "FROM tasks WHERE id = %s", (held[1], task_id))
            if row is None:
                return None
            seq, last, snap_pos, snap = row
            return last, None if snap is None else await load_snapshot(conn, seq, snap, snap_pos,
                                                                 last)

        got = await self.pool.run(run, retry=True)
        if got is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        last = int(got[0])
        return self._snapshot(task_id, got[1], last, held), last

    @contextmanager
    def fenced(self, task_id: str, token: str) -> Iterator[None]:
        """While in the body, this process's appends to ``task_id`` need the run queue's lease
        ``token`` (another worker took the run over: the append raises TaskEnded)."""
        self._fences[task_id] = token
        self.batcher.own(task_id, None)  # runs here: its position is learned at first
        try:
            yield
        finally:
            self._fences.pop(task_id, None)
            self.batcher.forget(task_id)

    async def append(self, task_id: str, event: LogEvent) -> int:
        # Encoded first: an event JSON cannot encode is refused before it takes a position.
        encoded = _encode(event)
        kind = KIND_OF[type(event)]
        token = self._fences.get(task_id)
        status = event.status if isinstance(event, TaskStatusUpdateEvent) else None
        ends = status is not None and status.state.terminal
        if not ends:
            # Batched with other tasks' events (appends.py), a due snapshot with them; a
            # working task's chunks and progress are not waited for, anything else is.
            wait = self.sync_events or (status is not None
                                        and status.state is not TaskState.WORKING)
            got = self.batcher.put(task_id, kind, LogEntry(0, event, encoded), status, token,
                                   wait, self.waiters.known.get(task_id, -1))
            if isinstance(got, int):
                return got
            pos = await self.batcher.wait_for(got)
            if pos is not None:
                return pos
        await self.batcher.drain(task_id)  # what was queued before it, written first
        pos, task, snap_pos = await self._append_full(task_id, event, encoded, kind, token,
                                                      ends)
        if ends:
            self.batcher.forget(task_id)
        else:
            self.batcher.track(task_id, pos, snap_pos)
        if task is not None:
            self._remember(task_id, task, pos)
        else:
            self._cache.pop(task_id, None)
        self._keep(task_id, pos, [LogEntry(pos, event, encoded)])
        self.waiters.saw(task_id, pos)
        if ends:
            self._ended_here(task_id)
            await self._retain()
        return pos

    async def _append_full(self, task_id: str, event: LogEvent, encoded: bytes, kind: int,
                           token: str | None, ends: bool) -> tuple[int, Task | None, int]:
        """Append under the task's row lock, in one transaction: what the batch skipped (the
        end, a snapshot due, a missing or ended task, a lost lease). TaskEnded, TaskNotFound."""
        held = self._cache.get(task_id)
        trajectory = isinstance(event, TrajectoryEvent)
        limit = self.max_events_per_task
        lazy = not ends and not self.sync_events
        if held is not None:
            # Usually this process holds the snapshot at the task's last position: one
            # statement (one round trip) writes it with the event if the position is still
            # that one; else the transaction below reads and locks first.
            pos = held[1] + 1
            task = held[0] if trajectory else applied(held[0], event)
            new = _encode(task)
            state, ts = task.status.state.value, task.status.timestamp
            written = None
            if ends:  # shared with concurrent ends (group_commit.py); None: alone
                written = await self.ends.submit(End(task_id, pos, state, ts, new, encoded,
                                                     kind, token, pos - limit))
            if written is None:
                args = known_args(task_id, pos, state, ts, new, encoded, kind, token,
                                  pos - limit, ends, lazy, self.channel)
                written = await self.pool.run(lambda c: known(c, args), transaction=False)
            if written:
                if ends:
                    self._ended_at(task_id, new)
                self._notify_after(lazy, pos, task_id)
                return pos, task, pos

        ended: list[bytes] = []  # the end's snapshot, once committed

        async def run(conn: Conn) -> tuple[int, Task | None, int]:
            # Two statements: read and lock the task (with the commit mode and the run's lease
            # token), then one that writes the task, the event and the notification together.
            row = await conn.one(
                "SELECT seq, last, state, snap_pos, CASE WHEN last = %s THEN NULL ELSE snap END, "
                "(SELECT token FROM runs WHERE task_id = %s), "
                "set_config('synchronous_commit', %s, true) FROM tasks WHERE id = %s "
                "FOR UPDATE OF tasks",
                (held[1] if held is not None else -1, task_id,
                 "off" if lazy else "on", task_id))
            if row is None:
                raise TaskNotFound(f"task {task_id!r} not found")
            seq, last, state, snap_pos, snap, lease, _ = row
            if TaskState(state).terminal:
                raise _Ended
            if token is not None and lease != token:
                raise _Ended  # our lease went to another worker: record nothing
            pos = int(last) + 1
            task: Task | None = None
            if trajectory:
                update = "UPDATE tasks SET last = %s, size = size + %s WHERE seq = %s"
                args: tuple[Any, ...] = (pos, len(encoded), seq)
                if held is not None and held[1] == last:
                    task = held[0]
            else:
                if snap is not None:
                    task = decode_task(await load_snapshot(conn, seq, snap, snap_pos, last))
                    apply_event(task, event)
                elif held is not None:
                    task = applied(held[0], event)
                else:
                    raise ServerUnavailable("the task store's cache lost a snapshot")
                status = task.status
                if ends or pos - snap_pos >= min(SNAP_EVERY, limit):
                    new = _encode(task)
                    if ends:
                        ended.append(new)
                    args = (pos, status.state.value, status.timestamp, new,
                            len(encoded) + len(new), ends, ends, seq)
                    update = full_update(ends, True)
                else:
                    args = (pos, status.state.value, status.timestamp, len(encoded), seq)
                    update = full_update(ends, False)
            # A synchronous commit notifies after it (below): PostgreSQL holds its lock on
            # the notification queue through the commit's WAL flush, so every other
            # notifying commit (the batches of every task) would wait for that flush.
            await conn.execute(WRITE.format(update=update), (
                *args, seq, pos, kind, encoded, seq, pos - limit,
                self.channel if lazy else "", self.channel, f"{pos} {task_id}"))
            return pos, task, pos if "snap_pos" in update else int(snap_pos)

        try:
            got = await self.pool.run(run)
        except _Ended:
            self._cache.pop(task_id, None)
            self._local.pop(task_id, None)
            raise TaskEnded(task_id) from None
        if ended:
            self._ended_at(task_id, ended[-1])
        self._notify_after(lazy, got[0], task_id)
        return got

    def _notify_after(self, lazy: bool, pos: int, task_id: str) -> None:
        """After a synchronous commit: its notification, sent soon by the batch writer with
        others (lost with a crash meanwhile: other replicas' waiters re-read within
        ``poll_interval``)."""
        if not lazy:
            self.batcher.notify(f"{pos} {task_id}")

    async def _retain(self) -> None:
        """After a task's end: the retention sweep (store.py)."""
