"""What opening the file finds, and what a restart does about it.

Loaded into memory: every task that has not ended (its snapshot and position) and every queued
run. Then, for each task that had not ended:

- it has a queued run (a detached run): the run is made ready again; the worker executes it
  with ``ctx.attempt`` one more than the leases taken so far (> 1 if a run had started);
- it has none (an interactive run, whose caller's connection died with the process): its end is
  recorded as ``canceled`` with the reason ``restart`` and a message saying so (another one for
  a run that was waiting for input: its caller had an answer, and the run to answer is gone).

Ended tasks are not loaded (they are read from the file when asked for), so start-up time grows
with the running tasks, not the stored ones.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from typing import Any

import anyio
import msgspec

from ...protocol.errors import ServerUnavailable
from ...protocol.types import TaskState
from ..base import LogEntry, TaskEnded
from ..liveness import lost_event
from ..records import DECODERS, copy_task, decode_task
from ..snapshot import apply_event
from .queue import SQLiteRunQueue, job_of
from .records import Record
from .schema import StoreOpenError, damaged
from .store import SQLiteTaskStore

log = logging.getLogger("scoped_a2a.sqlite")

RESTART_TEXT = ("Canceled: the server stopped while this interactive run was in flight, and its "
                "caller's connection went with it; send the message again")
PARKED_TEXT = ("Canceled: the server stopped while this interactive run was waiting for input, "
               "and the run went with it (an answer has nothing to go to); start over with a "
               "new message")


def _load(conn: sqlite3.Connection
          ) -> tuple[list[Any], list[Any], list[Any], list[bytes], tuple[int, int]]:
    conn.execute("BEGIN")
    try:
        tasks = conn.execute("SELECT seq, id, owner, context_id, snap, snap_pos, last, size "
                             "FROM tasks WHERE ended_at IS NULL ORDER BY seq").fetchall()
        # The events each running task's snapshot does not reflect yet.
        events = conn.execute(
            "SELECT e.task, e.pos, e.kind, e.body FROM tasks t JOIN events e ON e.task = t.seq "
            "WHERE t.ended_at IS NULL AND e.pos > t.snap_pos ORDER BY e.task, e.pos").fetchall()
        runs = conn.execute("SELECT task_id, message, meta, why, owner FROM runs "
                            "ORDER BY seq").fetchall()
        ended = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM tasks "
                             "WHERE ended_at IS NOT NULL").fetchone()
        keys = [bytes(k) for (k,) in conn.execute("SELECT key FROM claims")]
        return tasks, events, runs, keys, (int(ended[0]), int(ended[1]))
    finally:
        conn.execute("COMMIT")


def _rebuild(store: SQLiteTaskStore, queue: SQLiteRunQueue, tasks: list[Any],
             events: list[Any], runs: list[Any]) -> set[str]:
    """Decode the loaded rows into the store's live records and the queue's ready runs (no
    I/O); the ids of the tasks with a queued run. Raises the decoder's error on a value that
    does not decode; the store is then not used."""
    logs: dict[int, list[LogEntry]] = {}
    for seq, pos, kind, body in events:
        body = bytes(body)
        logs.setdefault(seq, []).append(LogEntry(pos, DECODERS[kind].decode(body), body))
    for seq, task_id, owner, context_id, snap, snap_pos, last, task_size in tasks:
        work = decode_task(snap)
        log_ = logs.get(seq, [])
        for entry in log_:
            apply_event(work, entry.event)
        rec = Record(seq, task_id, owner, context_id, work, copy_task(work), last, snap_pos,
                     task_size)
        rec.events.extend(log_)
        store.live[task_id] = rec
    queued = set()
    for row in runs:
        job = job_of(row)
        queued.add(job.task_id)
        queue.ready(job)
    return queued


async def recover(store: SQLiteTaskStore, queue: SQLiteRunQueue) -> tuple[int, int]:
    """Load the file's running tasks and queued runs; record interrupted interactive runs as
    ended. Returns (runs made ready again, interactive runs recorded ended).

    A file whose rows SQLite cannot read, or whose stored JSON does not decode (damage inside
    a value, which SQLite's own check at open cannot see), is refused with StoreOpenError
    (:func:`.schema.damaged`) before anything is written to it."""
    try:
        tasks, events, runs, keys, (count, size) = await anyio.to_thread.run_sync(
            _load, store.db.reader)
    except sqlite3.DatabaseError as exc:
        raise damaged(store.path, f"SQLite: {exc}") from None
    try:
        queued = _rebuild(store, queue, tasks, events, runs)
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError, UnicodeDecodeError) as exc:
        raise damaged(store.path, f"a stored task does not decode: {exc}") from None
    store.ended_count, store.ended_bytes = count, size
    store.claim_keys.update(keys)
    orphans = [rec for rec in store.live.values() if rec.id not in queued]

    async def end(rec: Record) -> None:
        # The reason on the message too, where every other end records it (the runner's
        # end_message): a resend of the run's message reads it there and runs it again.
        # A parked run's caller was answered (input-required): its answer, not a resend, is
        # what it would send next, and there is no run left to take it.
        text = PARKED_TEXT if rec.work.status.state.interrupted else RESTART_TEXT
        event = lost_event(rec.id, rec.context_id, TaskState.CANCELED, "restart", text)
        try:
            with contextlib.suppress(TaskEnded):
                await store.append(rec.id, event)
        except ServerUnavailable as exc:  # e.g. the disk is full: say so, start nothing
            failed.append(str(exc))

    failed: list[str] = []
    # Concurrently, so the writer commits them in a few batches rather than one each.
    async with anyio.create_task_group() as tg:
        for rec in orphans:
            tg.start_soon(end, rec)
    if failed:
        raise StoreOpenError(f"cannot record the interrupted runs: {failed[0]}")
    if queued or orphans:
        log.info("SQLite store %s: %d queued run(s) ready again, %d interrupted interactive "
                 "run(s) recorded canceled", store.path, len(queued), len(orphans))
    await store._retain()
    return len(queued), len(orphans)
