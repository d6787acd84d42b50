"""The PostgreSQL task store: reads, ListTasks, message claims and push configs, over the core
(core.py: tasks, snapshots, appends) shared by every replica.

Reads. A process keeps the last entries it appended to each task and the snapshot after them:
a read of such a task is answered from them while the listener is connected and no later
position has been announced, so a stream on the replica that executes the run costs no trip
to the database. Any other read goes to the database.

Waiting. :meth:`wait` sleeps on a local event woken by this process's appends (once committed)
and by the listener (other replicas' commits, within milliseconds), and re-reads every
``poll_interval`` seconds in case a notification was lost while the listener reconnected.

Retention (retention.py): ``--retain`` seconds, ``--max-ended-tasks`` and ``--max-ended-bytes``
over every ended task in the schema, oldest-ended first, swept after task ends (at most every
``SWEEP_EVERY`` seconds per process). Running tasks are never deleted.

Cancellation: every method is safe to cancel (connection.py). Errors: ServerUnavailable (one
line) when the database cannot be used.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import msgspec

from ...protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from ...protocol.types import (
    ListTasksRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from ..base import LogEntry, LogPage, TaskPage, page_bounds
from ..claims import PriorSend, claim_key
from ..records import DECODERS, decode_task
from . import claims
from .connection import Conn
from .core import PostgresCore, load_snapshot
from .retention import SWEEP_EVERY, sweep

log = logging.getLogger("scoped_a2a.postgres")
_encode = msgspec.json.Encoder().encode
_decode_push = msgspec.json.Decoder(TaskPushNotificationConfig).decode
_TERMINAL = [s.value for s in TaskState if s.terminal]


class PostgresTaskStore(PostgresCore):
    """Tasks in one PostgreSQL schema, shared by every process that uses it.

    Build it with :func:`~scoped_a2a.store.postgres.open_postgres_store`.
    """

    def _read_local(self, task_id: str, after: int, max_events: int, max_bytes: int
                    ) -> LogPage | None:
        """The page from what this process holds, when that is the whole log after ``after``
        as far as it knows: it appended every entry since then, holds the snapshot at the
        last one, and no later position was announced (while listening, every commit
        anywhere is announced within milliseconds). None: read the database."""
        entries = self._local.get(task_id)
        held = self._cache.get(task_id)
        if held is None or not self.waiters.listening:
            return None
        if not entries:
            # A task whose run is here and has committed nothing since the snapshot held (a
            # stream's first read): this process writes its positions (events handed over
            # and not yet committed are not to be read), so nothing follows.
            mine = self.batcher.last_here(task_id)
            if (held[1] != after or self.waiters.known.get(task_id, -1) > after
                    or mine is None or mine < after):
                return None
            first = max(1, after - self.max_events_per_task + 1)
            return LogPage([], after, False, held[0], first)
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

        async def run(conn: Conn) -> tuple[int, bytes | None, list[Any]]:
            row = await conn.one(
                "SELECT seq, last, snap_pos, CASE WHEN last = %s THEN NULL ELSE snap END "
                "FROM tasks WHERE id = %s", (mine, task_id))
            if row is None:
                raise TaskNotFound(f"task {task_id!r} not found")
            seq, last, snap_pos, snap = row
            if snap is not None:
                snap = await load_snapshot(conn, seq, snap, snap_pos, last)
            rows: list[Any] = []
            if last > after:
                rows = await conn.all(
                    "SELECT pos, kind, body FROM events WHERE task = %s AND pos > %s "
                    "AND pos <= %s ORDER BY pos LIMIT %s",
                    (seq, after, last, max_events))
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
        # The total is counted at the first page (a count(*) over the matching tasks: ~150
        # ms for 900,000 of one owner, docs/postgres.md) and carried in the page token
        # (``position.total``), so later pages cost only their rows.
        token, dot, counted = (request.page_token or "").partition(".")
        size, before = page_bounds(msgspec.structs.replace(request, page_token=token or None))
        if dot and not (counted.isascii() and counted.isdigit() and len(counted) <= 18):
            raise InvalidParams("pageToken is not one this server issued")
        carried = int(counted) if dot and before is not None else None
        where, args = ["TRUE"], []
        for clause, value in (("owner = %s", owner), ("context_id = %s", request.context_id),
                              ("state = %s", request.status.value if request.status else None),
                              ("coalesce(ts, '') >= %s", request.status_timestamp_after)):
            if value is not None:
                where.append(clause)
                args.append(value)
        cond = " AND ".join(where)

        async def run(conn: Conn) -> tuple[int, list[Any]]:
            total = (carried,) if carried is not None else await conn.one(
                f"SELECT count(*) FROM tasks WHERE {cond}", args)
            page_cond = cond + (" AND seq < %s" if before is not None else "")
            page_args = [*args, before] if before is not None else args
            rows = await conn.all(f"SELECT seq, snap, snap_pos, last FROM tasks WHERE "
                                f"{page_cond} ORDER BY seq DESC LIMIT %s",
                                [*page_args, size + 1])
            return int(total[0]) if total else 0, [
                (seq, await load_snapshot(conn, seq, snap, snap_pos, last))
                for seq, snap, snap_pos, last in rows]

        total, rows = await self.pool.run(run, retry=True)
        more = len(rows) > size
        rows = rows[:size]
        token = f"{rows[-1][0]}.{total}" if more and rows else ""
        return TaskPage([decode_task(snap) for _, snap in rows], token, total, size)

    # --- message claims (docs/exactly-once.md) --------------------------------------------

    async def claim_message(
        self, owner: str, message_id: str, fingerprint: bytes, task_id: str, *,
        position: int = 0, created: bool = False,
    ) -> PriorSend | None:
        key = claim_key(owner, message_id)
        if await self.pool.run(lambda c: claims.claim_free(
                c, key, fingerprint, task_id, position, created), transaction=False):
            return None  # one round trip: the message was never seen
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

    # --- push configs (sealed: ..sealing) ----------------------------------------------------

    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        assert config.id is not None
        body = self.sealer.seal(_encode(config))
        config_id = config.id

        async def run(conn: Conn) -> bool:
            done = await conn.one(
                "INSERT INTO push SELECT seq, %s, %s, last, state, TRUE FROM tasks "
                "WHERE id = %s ON CONFLICT (task, config_id) DO UPDATE SET body = "
                "excluded.body RETURNING 1", (config_id, body, task_id))
            return done is not None

        if not await self.pool.run(run):
            raise TaskNotFound(f"task {task_id!r} not found")

    async def push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]:
        async def run(conn: Conn) -> list[Any] | None:
            if await conn.one("SELECT 1 FROM tasks WHERE id = %s", (task_id,)) is None:
                return None
            return await conn.all("SELECT p.body FROM push p JOIN tasks t ON t.seq = p.task "
                                "WHERE t.id = %s ORDER BY p.config_id", (task_id,))

        rows = await self.pool.run(run, retry=True)
        if rows is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return [_decode_push(self.sealer.open(bytes(body))) for (body,) in rows]

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        async def run(conn: Conn) -> int | None:
            if await conn.one("SELECT 1 FROM tasks WHERE id = %s", (task_id,)) is None:
                return None
            return (await conn.execute("DELETE FROM push p USING tasks t WHERE t.seq = p.task AND "
                                "t.id = %s AND p.config_id = %s", (task_id, config_id))).rowcount

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
        rows = await self.pool.run(lambda c: c.all(
            "SELECT t.id, p.config_id, p.cursor, p.state, p.v1 FROM push p "
            "JOIN tasks t ON t.seq = p.task WHERE NOT (p.state = ANY(%s))",
            (_TERMINAL,)), retry=True)
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
        ``max_ended_bytes``, oldest-ended first; how many were deleted (retention.py)."""
        return await sweep(self.pool, self.policy, self.channel)

    async def aclose(self) -> None:
        """Close the idle connections."""
        self.pool.close()
