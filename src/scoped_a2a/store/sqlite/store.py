"""The SQLite task store: every task, log, push config, claim and queued run in one file.

:class:`.core.SQLiteCore` keeps the tasks (memory and file, reads, appends, retention; its
docstring says how); this adds ListTasks, message claims (docs/exactly-once.md) and push configs
(sealed at rest: seal.py).

Cancellation: every method is safe to cancel (writer.py). Errors: ServerUnavailable when the
file cannot be written or read, with what to fix.
"""

from __future__ import annotations

import sqlite3

import msgspec

from ...protocol.errors import TaskNotFound
from ...protocol.types import ListTasksRequest, TaskPushNotificationConfig, TaskState
from ..base import TaskPage, page_bounds
from ..claims import PriorSend, claim_key
from ..records import decode_task
from . import claims
from .core import SQLiteCore
from .writer import Work

_encode = msgspec.json.Encoder().encode
_decode_push = msgspec.json.Decoder(TaskPushNotificationConfig).decode


class SQLiteTaskStore(SQLiteCore):
    """Tasks in one SQLite file, owned by this process.

    Build it with :func:`~scoped_a2a.store.sqlite.open_sqlite_store`.
    """

    async def list_tasks(self, request: ListTasksRequest, *, owner: str | None = None) -> TaskPage:
        size, before = page_bounds(request)
        where, args = ["1"], []
        for clause, value in (("owner = ?", owner), ("context_id = ?", request.context_id),
                              ("state = ?", request.status.value if request.status else None),
                              ("coalesce(ts, '') >= ?", request.status_timestamp_after)):
            if value is not None:
                where.append(clause)
                args.append(value)
        cond = " AND ".join(where)

        def query(c: sqlite3.Connection) -> tuple[int, list[tuple[int, str, bytes]], bool]:
            total = c.execute(f"SELECT count(*) FROM tasks WHERE {cond}", args).fetchone()[0]
            page_cond = cond + (" AND seq < ?" if before is not None else "")
            page_args = [*args, before] if before is not None else args
            rows = c.execute(f"SELECT seq, id, snap FROM tasks WHERE {page_cond} "
                             "ORDER BY seq DESC LIMIT ?", [*page_args, size + 1]).fetchall()
            return total, rows[:size], len(rows) > size

        total, rows, more = await self._read(query)
        token = str(rows[-1][0]) if more and rows else ""
        tasks = []
        for _, task_id, snap in rows:
            rec = self.live.get(task_id)  # a running task's file snapshot may lag: memory's
            tasks.append(rec.view if rec is not None else decode_task(snap))
        return TaskPage(tasks, token, total, size)

    # --- message claims (docs/exactly-once.md) ---------------------------------------------

    # A claim for a task that exists (a follow-up) is committed at once; a new task's claim is
    # held in memory until the task's own transaction writes it (claims.Pending).

    def _pending_prior(self, key: bytes) -> PriorSend | None:
        held = self._pending.get(key)
        if held is None:
            return None
        fp, task_id, position = held
        return PriorSend(task_id, fp, position, task_id in self.live or task_id in self._recent)

    async def claim_message(
        self, owner: str, message_id: str, fingerprint: bytes, task_id: str, *,
        position: int = 0, created: bool = False,
    ) -> PriorSend | None:
        key = claim_key(owner, message_id)
        if created or task_id in self.live or task_id in self._recent:
            self.note_claim(key)
            result: PriorSend | None = await self.writer.write(Work(
                lambda c: claims.claim(c, key, fingerprint, task_id, position, True)))
            return result
        prior = self._pending_prior(key)
        if prior is not None:
            return prior
        # The file is read only for a key it may hold (a resend): a new messageId, the usual
        # case, costs no trip to the reader thread.
        if key in self.claim_keys:
            prior = await self._read(lambda c: claims.lookup(c, key))
        if prior is None:
            prior = self._pending_prior(key)  # claimed here while the file was read
        if prior is not None:
            return prior
        self._pending.add(key, fingerprint, task_id, position)
        return None

    async def reclaim_message(
        self, owner: str, message_id: str, old_task_id: str, new_task_id: str
    ) -> PriorSend | None:
        key = claim_key(owner, message_id)
        held = self._pending.get(key)
        if held is not None:
            if held[1] != old_task_id:
                return self._pending_prior(key)
            self._pending.drop(key)
            self._pending.add(key, held[0], new_task_id, 0)
            return None
        self.note_claim(key)
        result: PriorSend | None = await self.writer.write(Work(
            lambda c: claims.reclaim(c, key, old_task_id, new_task_id)))
        return result

    async def release_message(self, owner: str, message_id: str, task_id: str) -> None:
        key = claim_key(owner, message_id)
        held = self._pending.get(key)
        if held is not None:
            if held[1] == task_id:
                self._pending.drop(key)
            return
        await self.writer.write(Work(lambda c: claims.release(c, key, task_id)))

    # --- push configs (sealed: seal.py) ----------------------------------------------------

    async def set_push_config(self, task_id: str, config: TaskPushNotificationConfig) -> None:
        assert config.id is not None
        rec = await self._row(task_id)
        body = self.sealer.seal(_encode(config))
        row = (rec.seq, config.id, body, rec.last, rec.view.status.state.value)
        await self.writer.write(Work(lambda c: c.execute(
            "INSERT INTO push VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (task, config_id) "
            "DO UPDATE SET body = excluded.body", row)))

    async def push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]:
        seq = (await self._row(task_id)).seq
        rows = await self._read(lambda c: c.execute(
            "SELECT body FROM push WHERE task = ?", (seq,)).fetchall())
        return [_decode_push(self.sealer.open(bytes(body))) for (body,) in rows]

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        seq = (await self._row(task_id)).seq
        n = await self.writer.write(Work(lambda c: c.execute(
            "DELETE FROM push WHERE task = ? AND config_id = ?", (seq, config_id)).rowcount))
        return bool(n)

    async def push_progress(self, task_id: str, config_id: str, cursor: int, state: str,
                            v1: bool) -> None:
        """How far the watch of a push config got (its deliveries resume there after a
        restart)."""
        try:
            seq = (await self._row(task_id)).seq
        except TaskNotFound:
            return  # deleted by retention meanwhile: nothing left to resume
        await self.writer.write(Work(lambda c: c.execute(
            "UPDATE push SET cursor = ?, state = ?, v1 = ? WHERE task = ? AND config_id = ?",
            (cursor, state, int(v1), seq, config_id))))

    async def pending_pushes(self) -> list[tuple[str, str, int, str, bool]]:
        rows = await self._read(lambda c: c.execute(
            "SELECT t.id, p.config_id, p.cursor, p.state, p.v1 FROM push p "
            "JOIN tasks t ON t.seq = p.task").fetchall())
        return [(t, c, cur, st, bool(v1)) for t, c, cur, st, v1 in rows
                if not TaskState(st).terminal]
