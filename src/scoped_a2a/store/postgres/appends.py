"""Appends in PostgreSQL: a running task's intermediate events, several tasks per statement.

Most events a task appends (artifact chunks, trajectory events, status updates short of the
end) change only its row's position, state and size and add one event row. Those go through
:class:`Batcher`: while one such write is in flight, the events of other tasks queue, and the
next write takes them all in one statement (``unnest`` of arrays: one round trip, one implicit
transaction, one commit), so 16 streams cost about one round trip per 16 events. Each
:meth:`Batcher.append` returns only once its statement has committed (the send promise), with
the event's position. The statement skips a task that is missing or terminal, whose run lost
its queue lease (``fenced``), or whose snapshot is due: its caller then takes the full path
(:func:`append_sql`, two statements in one transaction under the row lock), which raises or
writes the snapshot. One event per task per statement, so a task's positions stay in order.

The row lock of each task is taken by the UPDATE, so appends to one task from any replica are
serialized; a deadlock between two replicas' batches (each locking tasks the other wants:
both would have to append to the same two tasks at once) is caught: every event of the batch
then takes the full path.

Cancellation: a write runs to its commit whatever happens to its callers (connection.py); a
caller cancelled while its event waits in the queue takes it out. Errors: ServerUnavailable
for every event of a batch that could not be written.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio
import msgspec
from psycopg import errors as pgerrors

from ...protocol.types import TaskState
from .connection import Conn, Pool
from .schema import NOW

TERMINAL = [s.value for s in TaskState if s.terminal]
MAX_BATCH = 128
"""Events written by one statement at most."""

_BATCH = (
    "WITH i AS (SELECT x->>0 AS id, (x->>1)::int2 AS kind, decode(x->>2, 'base64') AS body, "
    "x->>3 AS state, x->>4 AS ts, x->>5 AS token FROM json_array_elements(%s::json) x), "
    "t AS (UPDATE tasks SET last = tasks.last + 1, size = tasks.size + length(i.body), "
    "state = coalesce(i.state, tasks.state), "
    "ts = CASE WHEN i.state IS NULL THEN tasks.ts ELSE i.ts END "
    "FROM i WHERE tasks.id = i.id AND tasks.state NOT IN ({terminal}) "
    "AND tasks.last + 1 - tasks.snap_pos < {every} "
    "AND (i.token IS NULL OR i.token = (SELECT token FROM runs r WHERE r.task_id = i.id)) "
    "RETURNING tasks.seq, tasks.last, tasks.id, i.kind, i.body), "
    "e AS (INSERT INTO events SELECT seq, last, kind, body FROM t), "
    "d AS (DELETE FROM events USING t WHERE events.task = t.seq AND events.pos = t.last - {limit}) "
    "SELECT id, last, set_config('synchronous_commit', %s, true), "
    "pg_notify(%s, last || ' ' || id) FROM t")
"""Every queued event in one statement (data-modifying CTEs all run; the trim deletes nothing
until a log is longer than its cap). The events go as one JSON parameter (bodies in base64):
one statement text, prepared once per connection, and psycopg's adaptation of six arrays
cost more CPU than the whole statement."""
_encode = msgspec.json.Encoder().encode


class _Item:
    __slots__ = ("body", "done", "error", "id", "kind", "pos", "promoted", "state", "token",
                 "ts")

    def __init__(self, task_id: str, kind: int, body: bytes, state: str | None,
                 ts: str | None, token: str | None) -> None:
        self.id, self.kind, self.body = task_id, kind, body
        self.state, self.ts, self.token = state, ts, token
        self.done = anyio.Event()
        self.pos: int | None = None  # written at this position (None: take the full path)
        self.error: BaseException | None = None
        self.promoted = False  # this caller writes the next batch


class Batcher:
    """Intermediate events of running tasks, written many tasks per statement."""

    def __init__(self, pool: Pool, channel: str, limit: int, every: int, sync: bool) -> None:
        self.pool = pool
        self.channel = channel
        self.limit = limit  # events kept per task (older ones are trimmed)
        self.every = every  # a snapshot is due this many events after the last one
        self.commit = "on" if sync else "off"
        self.sql = _BATCH.format(terminal=", ".join(f"'{s}'" for s in TERMINAL),
                                 every=int(every), limit=int(limit))
        self._queue: deque[_Item] = deque()
        self._busy = False  # a batch is being written: new events wait for the next

    async def append(self, task_id: str, kind: int, body: bytes, state: str | None,
                     ts: str | None, token: str | None) -> int | None:
        """The position ``body`` was committed at, or None: take the full path.
        ``state``/``ts``: the task's new status (a status event), else None."""
        item = _Item(task_id, kind, body, state, ts, token)
        self._queue.append(item)
        if self._busy:
            try:
                await item.done.wait()
            except BaseException:
                if item.promoted:
                    self._queue.remove(item)
                    self._next()  # the lead passes on
                elif item in self._queue:  # not taken yet: it will not be written
                    self._queue.remove(item)
                raise
            if not item.promoted:
                return self._result(item)
        self._busy = True
        try:
            await self._write(self._take())
        finally:
            self._next()
        return self._result(item)

    @staticmethod
    def _result(item: _Item) -> int | None:
        if item.error is not None:
            raise item.error
        return item.pos

    def _next(self) -> None:
        """Hand the next batch to the first caller still waiting, or go idle."""
        if self._queue:
            first = self._queue[0]
            first.promoted = True
            first.done.set()
        else:
            self._busy = False

    def _take(self) -> list[_Item]:
        """The queued events to write now: the first of each task, in order."""
        batch: list[_Item] = []
        seen: set[str] = set()
        later: deque[_Item] = deque()
        while self._queue and len(batch) < MAX_BATCH:
            item = self._queue.popleft()
            if item.id in seen:
                later.append(item)
            else:
                seen.add(item.id)
                batch.append(item)
        later.extend(self._queue)
        self._queue = later
        return batch

    async def _write(self, batch: list[_Item]) -> None:
        events = _encode([(i.id, i.kind, i.body, i.state, i.ts, i.token) for i in batch])
        args = (events.decode(), self.commit, self.channel)

        async def run(conn: Conn) -> list[Any]:
            return await conn.all(self.sql, args)

        try:
            rows = await self.pool.run(run, transaction=False)
        except pgerrors.DeadlockDetected:
            rows = []  # nothing was written: each event takes the full path
        except BaseException as exc:
            for item in batch:
                item.error, item.promoted = exc, False
                item.done.set()
            raise
        written = {task_id: int(pos) for task_id, pos, _, _ in rows}
        for item in batch:
            item.pos = written.get(item.id)
            item.promoted = False
            item.done.set()


def full_update(ends: bool, snapshot: bool) -> str:
    """The UPDATE of the full path: with the new snapshot (due, or the task's end) or not."""
    if snapshot:
        return (f"UPDATE tasks SET last = %s, state = %s, ts = %s, snap = %s, "
                f"snap_pos = last + 1, size = size + %s, "
                f"ended_at = CASE WHEN %s THEN {NOW} END, "
                f"process = CASE WHEN %s THEN NULL ELSE process END WHERE seq = %s")
    return "UPDATE tasks SET last = %s, state = %s, ts = %s, size = size + %s WHERE seq = %s"


WRITE = ("WITH t AS ({update}), e AS (INSERT INTO events VALUES (%s, %s, %s, %s)), "
         "d AS (DELETE FROM events WHERE task = %s AND pos = %s) SELECT pg_notify(%s, %s)")
"""The full path's second statement: the task's row, the event and the notification."""
