"""The PostgreSQL task store: tasks, logs, push configs and claims shared by every replica.

Every operation is one transaction in a worker thread (connection.py); nothing is kept in this
process that another replica could change, except caches checked against the database.

Appends. The task's row is locked (``SELECT ... FOR UPDATE``), so appends to one task from any
replica are serialized and positions are the same per-task integers as in memory. A terminal
task refuses the event (:class:`TaskEnded`: terminal states never change), and a run executing
under a queue lease (``fenced``) writes only while the ``runs`` row still holds its token. The
event row, the new snapshot and a ``NOTIFY`` commit together; :meth:`append` returns once
committed, so whatever a caller was answered is stored.

Durability. A create, a claim, a queued run and a task's end commit synchronously (the WAL is
on the server's disk before the caller is answered). A running task's other events commit with
``synchronous_commit = off`` unless ``sync_events``: they are visible at once and reach the
disk within ~3 × ``wal_writer_delay`` (600 ms by default); a crash of the PostgreSQL server (not
of this process) in that window can lose them, and a reader may have seen them (docs/postgres.md
says what that means). Each synchronous commit costs a WAL flush (5 ms on this machine's disk).

Snapshots. The row keeps the task's 1.0 JSON as of ``snap_pos``, written every SNAP_EVERY
events and at the end; whoever reads it folds the status and artifact events after it
(:func:`load_snapshot`). The writer folds each event into the snapshot it last saw, and reads
the stored one only if the position moved meanwhile; readers skip the snapshot's bytes when
theirs is current.

Reads. A process keeps the last entries it appended to each task and the snapshot after them:
a read of such a task is answered from them while the listener is connected and no later
position has been announced, so a stream on the replica that executes the run costs no trip
to the database. Any other read goes to the database.

Waiting. :meth:`wait` sleeps on a local event woken by this process's appends and by the
listener (other replicas' commits, within milliseconds), and re-reads every ``poll_interval``
seconds in case a notification was lost while the listener reconnected.

Retention: ``--retain`` seconds, ``--max-ended-tasks`` and ``--max-ended-bytes`` over every
ended task in the schema, oldest-ended first, swept after task ends (at most every
``SWEEP_EVERY`` seconds per process). Running tasks are never deleted.

Cancellation: every method is safe to cancel (connection.py). Errors: ServerUnavailable (one
line) when the database cannot be used.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import msgspec
import psycopg
from psycopg import errors as pgerrors

from ...protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from ...protocol.trajectory import LogEvent, TrajectoryEvent
from ...protocol.types import (
    ListTasksRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from ..base import LogEntry, LogPage, TaskEnded, TaskPage, TaskStore, page_bounds
from ..claims import PriorSend, claim_key
from ..handover import HandoverTransport
from ..process_leases import DEFAULT_LEASE, ProcessLeases
from ..push_watches import PushWatches
from ..snapshot import apply_event
from ..sqlite.records import DECODERS, KIND_OF, TRAJECTORY, decode_task
from ..sqlite.retention import Retention
from ..sqlite.seal import Sealer
from . import claims
from .connection import Pool
from .handover import PostgresHandover
from .leases import PostgresLeases
from .listener import Waiters
from .push_watches import PostgresPushWatches
from .schema import NOW

log = logging.getLogger("scoped_a2a.postgres")
_encode = msgspec.json.Encoder().encode
_decode_push = msgspec.json.Decoder(TaskPushNotificationConfig).decode
CACHE = 1024  # snapshots (decoded) of tasks recently written or read here
LOCAL_EVENTS = 256  # entries kept of each task this process appends to (reads skip the trip)
SWEEP_EVERY = 5.0
"""Seconds between two retention sweeps of one process (a sweep reads every ended task's
size: its cost grows with the ended tasks kept)."""
_TERMINAL = [s.value for s in TaskState if s.terminal]


SNAP_EVERY = 64
"""A running task's snapshot is written every this many events (and at its end); readers fold
the status and artifact events after it. Writing it at every event would cost a stream of
artifact chunks bytes quadratic in its length."""


def load_snapshot(conn: psycopg.Connection[Any], seq: int, snap: bytes, snap_pos: int,
                  last: int) -> bytes:
    """The task's JSON snapshot as of ``last``: ``snap`` (as of ``snap_pos``) with the status
    and artifact events after it folded in. Blocking: in the caller's transaction."""
    if snap_pos >= last:
        return bytes(snap)
    rows = conn.execute("SELECT kind, body FROM events WHERE task = %s AND pos > %s "
                        "AND pos <= %s AND kind <> %s ORDER BY pos",
                        (seq, snap_pos, last, TRAJECTORY)).fetchall()
    task = decode_task(snap)
    for kind, body in rows:
        apply_event(task, DECODERS[kind].decode(body))
    return _encode(task)


class _Ended(Exception):
    """Raised inside a transaction: the task is terminal, or the run lost its lease."""


class PostgresTaskStore(TaskStore):
    """Tasks in one PostgreSQL schema, shared by every process that uses it.

    Build it with :func:`~scoped_a2a.store.postgres.open_postgres_store`.
    """

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
        self._cache: OrderedDict[str, tuple[Task, int]] = OrderedDict()
        self._local: OrderedDict[str, deque[LogEntry]] = OrderedDict()
        self._fences: dict[str, str] = {}
        self._next_sweep = 0.0
        self.queue: Any = None  # the run queue (queue.py), set by open_postgres_store
        self.leases = PostgresLeases(pool, lease)
        """This process's liveness lease over its interactive runs (store/liveness.py)."""
        self.watches = PostgresPushWatches(pool, self.leases)
        """Who watches each push config (store/push_watches.py)."""
        self.handover = PostgresHandover(pool, self.leases.process_id,
                                         handover or sealer)
        """Carries follow-ups to the process holding their run (store/handover.py)."""

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

    # --- snapshots cache ------------------------------------------------------------------

    def _remember(self, task_id: str, task: Task, pos: int) -> None:
        self._cache[task_id] = (task, pos)
        self._cache.move_to_end(task_id)
        if len(self._cache) > CACHE:
            self._cache.popitem(last=False)

    def _held(self, task_id: str) -> tuple[Task | None, int]:
        """The cached snapshot of ``task_id`` and its position (None, -1 if none): a query
        skips sending the snapshot when the position is still this one."""
        held = self._cache.get(task_id)
        return held if held is not None else (None, -1)

    def _snapshot(self, task_id: str, snap: bytes | None, pos: int,
                  held: tuple[Task | None, int]) -> Task:
        """The snapshot at ``pos``: ``snap`` decoded, or ``held`` (taken before the query)
        when ``snap`` is None (the database skipped sending what this process held)."""
        if snap is None and held[0] is not None and held[1] == pos:
            return held[0]
        if snap is None:  # cannot happen: the query sends it unless the position was held's
            raise ServerUnavailable("the task store lost track of a snapshot; try again")
        task = decode_task(snap)
        if pos >= self._held(task_id)[1]:
            self._remember(task_id, task, pos)
        return task

    # --- tasks ----------------------------------------------------------------------------

    def create_sql(self, conn: psycopg.Connection[Any], task: Task, owner: str,
                   snap: bytes, process: str | None = None) -> None:
        """Store ``task`` in the caller's transaction (the run queue adds its row after);
        ``process``: the process whose liveness lease covers its run (leases.py)."""
        try:
            conn.execute(
                "INSERT INTO tasks (id, owner, context_id, state, ts, last, snap, ended_at, "
                "size, process) VALUES (%s, %s, %s, %s, %s, 0, %s, NULL, %s, %s)",
                (task.id, owner, task.context_id, task.status.state.value,
                 task.status.timestamp, snap, len(snap), process))
        except pgerrors.UniqueViolation:
            raise InvalidParams(f"task {task.id!r} already exists") from None
        claims.made(conn, task.id)

    def created(self, task: Task, snap: bytes) -> None:
        """``task`` was committed: its writer and readers here start from this snapshot."""
        self._remember(task.id, decode_task(snap), 0)

    async def create(self, task: Task, *, owner: str = "") -> None:
        # An interactive run: it executes in this process, so this process's liveness lease
        # covers it until its end is appended (store/liveness.py).
        snap = _encode(task)
        process = self.leases.process_id
        await self.pool.run(lambda c: self.create_sql(c, task, owner, snap, process))
        self.created(task, snap)

    async def owner_of(self, task_id: str) -> str:
        row = await self.pool.run(lambda c: c.execute(
            "SELECT owner FROM tasks WHERE id = %s", (task_id,)).fetchone(), retry=True)
        if row is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return str(row[0])

    async def get(self, task_id: str) -> tuple[Task, int]:
        held = self._held(task_id)
        def run(conn: psycopg.Connection[Any]) -> tuple[int, bytes | None] | None:
            row = conn.execute(
                "SELECT seq, last, snap_pos, CASE WHEN last = %s THEN NULL ELSE snap END "
                "FROM tasks WHERE id = %s", (held[1], task_id)).fetchone()
            if row is None:
                return None
            seq, last, snap_pos, snap = row
            return last, None if snap is None else load_snapshot(conn, seq, snap, snap_pos,
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
        try:
            yield
        finally:
            self._fences.pop(task_id, None)

    async def append(self, task_id: str, event: LogEvent) -> int:
        # Encoded first: an event JSON cannot encode is refused before it takes a position.
        encoded = _encode(event)
        kind = KIND_OF[type(event)]
        token = self._fences.get(task_id)
        held = self._cache.get(task_id)
        trajectory = isinstance(event, TrajectoryEvent)
        ends = isinstance(event, TaskStatusUpdateEvent) and event.status.state.terminal
        limit = self.max_events_per_task
        lazy = not ends and not self.sync_events
        every = min(SNAP_EVERY, limit)  # the events after the snapshot are never trimmed

        def run(conn: psycopg.Connection[Any]) -> tuple[int, Task | None]:
            # Two statements: read and lock the task (with the commit mode and the run's lease
            # token), then one that writes the task, the event and the notification together.
            row = conn.execute(
                "SELECT seq, last, state, snap_pos, CASE WHEN last = %s THEN NULL ELSE snap END, "
                "(SELECT token FROM runs WHERE task_id = %s), "
                "set_config('synchronous_commit', %s, true) FROM tasks WHERE id = %s "
                "FOR UPDATE OF tasks",
                (held[1] if held is not None else -1, task_id,
                 "off" if lazy else "on", task_id)).fetchone()
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
            else:
                # A copy to fold (the cached one may be in a reader's hands).
                if snap is not None:
                    base = load_snapshot(conn, seq, snap, snap_pos, last)
                elif held is not None:
                    base = _encode(held[0])
                else:
                    raise ServerUnavailable("the task store's cache lost a snapshot")
                task = decode_task(base)
                apply_event(task, event)
                status = task.status
                if ends or pos - snap_pos >= every:
                    new = _encode(task)
                    update = (f"UPDATE tasks SET last = %s, state = %s, ts = %s, snap = %s, "
                              f"snap_pos = last + 1, size = size + %s, "
                              f"ended_at = CASE WHEN %s THEN {NOW} END, "
                              f"process = CASE WHEN %s THEN NULL ELSE process END "
                              f"WHERE seq = %s")
                    args = (pos, status.state.value, status.timestamp, new,
                            len(encoded) + len(new), ends, ends, seq)
                else:
                    update = ("UPDATE tasks SET last = %s, state = %s, ts = %s, "
                              "size = size + %s WHERE seq = %s")
                    args = (pos, status.state.value, status.timestamp, len(encoded), seq)
            # Data-modifying CTEs all run, referenced or not; the trim deletes nothing until
            # the log is longer than its cap.
            conn.execute(
                f"WITH t AS ({update}), e AS (INSERT INTO events VALUES (%s, %s, %s, %s)), "
                "d AS (DELETE FROM events WHERE task = %s AND pos = %s) "
                "SELECT pg_notify(%s, %s)",
                (*args, seq, pos, kind, encoded, seq, pos - limit, self.channel,
                 f"{pos} {task_id}"))
            return pos, task

        try:
            pos, task = await self.pool.run(run)
        except _Ended:
            self._cache.pop(task_id, None)
            self._local.pop(task_id, None)
            raise TaskEnded(task_id) from None
        if task is not None:
            self._remember(task_id, task, pos)
        elif held is not None and held[1] == pos - 1:
            self._remember(task_id, held[0], pos)  # a trajectory event leaves it as it was
        self._keep(task_id, LogEntry(pos, event, encoded))
        self.waiters.saw(task_id, pos)
        if ends:
            await self._retain()
        return pos

    def _keep(self, task_id: str, entry: LogEntry) -> None:
        """Keep an entry this process appended, for :meth:`_read_local` (consecutive only)."""
        entries = self._local.get(task_id)
        if entries is None or entries[-1].position != entry.position - 1:
            entries = self._local[task_id] = deque(maxlen=LOCAL_EVENTS)
        self._local.move_to_end(task_id)
        entries.append(entry)
        if len(self._local) > CACHE:
            self._local.popitem(last=False)

    def _read_local(self, task_id: str, after: int, max_events: int, max_bytes: int
                    ) -> LogPage | None:
        """The page from what this process holds, when that is the whole log after ``after``
        as far as it knows: it appended every entry since then, holds the snapshot at the
        last one, and no later position was announced (while listening, every commit
        anywhere is announced within milliseconds). None: read the database."""
        entries = self._local.get(task_id)
        held = self._cache.get(task_id)
        if not entries or held is None or not self.waiters.listening:
            return None
        last = entries[-1].position
        if held[1] != last or self.waiters.known.get(task_id, -1) != last \
                or entries[0].position > after + 1:
            return None
        first = max(1, last - self.max_events_per_task + 1)
        out: list[LogEntry] = []
        size = 0
        for entry in entries:
            if entry.position <= after or entry.position < first:
                continue  # read already, or beyond the log's cap (the database dropped it)
            size += len(entry.encoded)
            if out and (len(out) >= max_events or size > max_bytes):
                break  # the first entry is always returned
            out.append(entry)
        nxt = out[-1].position if out else max(after, first - 1)
        return LogPage(out, nxt, nxt < last, held[0], first)

    async def read(
        self, task_id: str, after: int, *, max_events: int = 1000, max_bytes: int = 1 << 20
    ) -> LogPage:
        max_events = max(1, max_events)
        local = self._read_local(task_id, after, max_events, max_bytes)
        if local is not None:
            return local
        held = self._held(task_id)
        mine = held[1]
        limit = self.max_events_per_task

        def run(conn: psycopg.Connection[Any]) -> tuple[int, bytes | None, list[Any]]:
            row = conn.execute(
                "SELECT seq, last, snap_pos, CASE WHEN last = %s THEN NULL ELSE snap END "
                "FROM tasks WHERE id = %s", (mine, task_id)).fetchone()
            if row is None:
                raise TaskNotFound(f"task {task_id!r} not found")
            seq, last, snap_pos, snap = row
            if snap is not None:
                snap = load_snapshot(conn, seq, snap, snap_pos, last)
            rows: list[Any] = []
            if last > after:
                rows = conn.execute(
                    "SELECT pos, kind, body FROM events WHERE task = %s AND pos > %s "
                    "AND pos <= %s ORDER BY pos LIMIT %s",
                    (seq, after, last, max_events)).fetchall()
            return int(last), snap, rows

        last, snap, rows = await self.pool.run(run, retry=True)
        task = self._snapshot(task_id, snap, last, held)
        first = max(1, last - limit + 1)
        entries: list[LogEntry] = []
        size = 0
        for pos, kind, body in rows:
            size += len(body)
            if entries and size > max_bytes:  # the first entry is always returned
                break
            body = bytes(body)
            entries.append(LogEntry(int(pos), DECODERS[kind].decode(body), body))
        nxt = entries[-1].position if entries else max(after, first - 1)
        return LogPage(entries, nxt, nxt < last, task, first)

    def wake(self, task_id: str) -> None:
        self.waiters.wake(task_id)

    async def wait(self, task_id: str, after: int) -> None:
        event = self.waiters.event(task_id)  # registered before looking: no wake-up is missed
        if self.waiters.known.get(task_id, -1) > after:
            return
        with anyio.move_on_after(self.poll_interval):
            await event.wait()

    # --- ListTasks ------------------------------------------------------------------------

    async def list_tasks(self, request: ListTasksRequest, *, owner: str | None = None) -> TaskPage:
        size, before = page_bounds(request)
        where, args = ["TRUE"], []
        for clause, value in (("owner = %s", owner), ("context_id = %s", request.context_id),
                              ("state = %s", request.status.value if request.status else None),
                              ("coalesce(ts, '') >= %s", request.status_timestamp_after)):
            if value is not None:
                where.append(clause)
                args.append(value)
        cond = " AND ".join(where)

        def run(conn: psycopg.Connection[Any]) -> tuple[int, list[Any]]:
            total = conn.execute(f"SELECT count(*) FROM tasks WHERE {cond}",
                                 args).fetchone()
            page_cond = cond + (" AND seq < %s" if before is not None else "")
            page_args = [*args, before] if before is not None else args
            rows = conn.execute(f"SELECT seq, snap, snap_pos, last FROM tasks WHERE "
                                f"{page_cond} ORDER BY seq DESC LIMIT %s",
                                [*page_args, size + 1]).fetchall()
            return int(total[0]) if total else 0, [
                (seq, load_snapshot(conn, seq, snap, snap_pos, last))
                for seq, snap, snap_pos, last in rows]

        total, rows = await self.pool.run(run, retry=True)
        more = len(rows) > size
        rows = rows[:size]
        token = str(rows[-1][0]) if more and rows else ""
        return TaskPage([decode_task(snap) for _, snap in rows], token, total, size)

    # --- message claims (docs/exactly-once.md) --------------------------------------------

    async def claim_message(
        self, owner: str, message_id: str, fingerprint: bytes, task_id: str, *,
        position: int = 0, created: bool = False,
    ) -> PriorSend | None:
        key = claim_key(owner, message_id)
        result: PriorSend | None = await self.pool.run(
            lambda c: claims.claim(c, key, fingerprint, task_id, position, created))
        return result

    async def reclaim_message(
        self, owner: str, message_id: str, old_task_id: str, new_task_id: str
    ) -> PriorSend | None:
        key = claim_key(owner, message_id)
        result: PriorSend | None = await self.pool.run(
            lambda c: claims.reclaim(c, key, old_task_id, new_task_id))
        return result

    async def confirm_message(self, owner: str, message_id: str, task_id: str) -> None:
        key = claim_key(owner, message_id)
        await self.pool.run(lambda c: claims.confirm(c, key, task_id))

    async def release_message(self, owner: str, message_id: str, task_id: str) -> None:
        key = claim_key(owner, message_id)
        await self.pool.run(lambda c: claims.release(c, key, task_id))

    # --- push configs (sealed: ..sqlite.seal) ---------------------------------------------

    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        assert config.id is not None
        body = self.sealer.seal(_encode(config))
        config_id = config.id

        def run(conn: psycopg.Connection[Any]) -> bool:
            done = conn.execute(
                "INSERT INTO push SELECT seq, %s, %s, last, state, TRUE FROM tasks "
                "WHERE id = %s ON CONFLICT (task, config_id) DO UPDATE SET body = "
                "excluded.body RETURNING 1", (config_id, body, task_id)).fetchone()
            return done is not None

        if not await self.pool.run(run):
            raise TaskNotFound(f"task {task_id!r} not found")

    async def push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]:
        def run(conn: psycopg.Connection[Any]) -> list[Any] | None:
            if conn.execute("SELECT 1 FROM tasks WHERE id = %s", (task_id,)).fetchone() is None:
                return None
            return conn.execute("SELECT p.body FROM push p JOIN tasks t ON t.seq = p.task "
                                "WHERE t.id = %s ORDER BY p.config_id", (task_id,)).fetchall()

        rows = await self.pool.run(run, retry=True)
        if rows is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return [_decode_push(self.sealer.open(bytes(body))) for (body,) in rows]

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        def run(conn: psycopg.Connection[Any]) -> int | None:
            if conn.execute("SELECT 1 FROM tasks WHERE id = %s", (task_id,)).fetchone() is None:
                return None
            return conn.execute("DELETE FROM push p USING tasks t WHERE t.seq = p.task AND "
                                "t.id = %s AND p.config_id = %s", (task_id, config_id)).rowcount

        n = await self.pool.run(run)
        if n is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return bool(n)

    async def push_progress(self, task_id: str, config_id: str, cursor: int, state: str,
                            v1: bool) -> None:
        """How far the watch of a push config got (its deliveries resume there after a
        restart)."""
        await self.pool.run(lambda c: c.execute(
            "UPDATE push p SET cursor = %s, state = %s, v1 = %s FROM tasks t WHERE "
            "t.seq = p.task AND t.id = %s AND p.config_id = %s",
            (cursor, state, v1, task_id, config_id)))

    async def pending_pushes(self) -> list[tuple[str, str, int, str, bool]]:
        rows = await self.pool.run(lambda c: c.execute(
            "SELECT t.id, p.config_id, p.cursor, p.state, p.v1 FROM push p "
            "JOIN tasks t ON t.seq = p.task WHERE NOT (p.state = ANY(%s))",
            (_TERMINAL,)).fetchall(), retry=True)
        return [(t, c, int(cur), st, bool(v1)) for t, c, cur, st, v1 in rows]

    # --- retention ------------------------------------------------------------------------

    async def _retain(self) -> None:
        """Delete ended tasks beyond the policy (at most one sweep per SWEEP_EVERY here)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY
        try:
            await self.sweep()
        except ServerUnavailable as exc:  # the end is stored; the next end sweeps again
            log.warning("PostgreSQL store retention failed: %s", exc)

    async def sweep(self) -> int:
        """Delete ended tasks older than ``retain`` and beyond ``max_ended_tasks`` /
        ``max_ended_bytes``, oldest-ended first; how many were deleted."""
        policy = self.policy

        def run(conn: psycopg.Connection[Any]) -> int:
            victims: list[tuple[int, str]] = []
            if policy.retain is not None:
                victims += conn.execute(
                    f"SELECT seq, id FROM tasks WHERE ended_at IS NOT NULL AND ended_at < "
                    f"{NOW} - %s ORDER BY ended_at LIMIT 5000", (policy.retain,)).fetchall()
            # Beyond the count or the bytes: the oldest ended, past the newest that fit (the
            # newest is kept whatever its size: its caller is about to read its end).
            victims += conn.execute(
                "SELECT seq, id FROM (SELECT seq, id, row_number() OVER w AS n, "
                "sum(size) OVER w AS total FROM tasks WHERE ended_at IS NOT NULL "
                "WINDOW w AS (ORDER BY ended_at DESC, seq DESC)) x "
                "WHERE n > %s OR (total > %s AND n > 1) LIMIT 5000",
                (policy.max_ended_tasks, policy.max_ended_bytes)).fetchall()
            if not victims:
                return 0
            seqs = sorted({v[0] for v in victims})
            ids = sorted({v[1] for v in victims})
            conn.execute("DELETE FROM tasks WHERE seq = ANY(%s)", (seqs,))
            claims.tasks_gone(conn, ids, policy.claim_window)
            for task_id in ids:
                conn.execute("SELECT pg_notify(%s, %s)", (self.channel, f"0 {task_id}"))
            return len(seqs)

        return int(await self.pool.run(run))

    async def aclose(self) -> None:
        """Close the idle connections."""
        self.pool.close()
