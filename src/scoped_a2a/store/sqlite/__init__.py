"""Tasks and durable detached runs in one SQLite file (stdlib ``sqlite3``; ``--store sqlite:PATH``).

::

    async with open_sqlite_store("tasks.db") as store:
        app = A2AApp(agent, store=store)          # detached runs go to the durable queue
        async with anyio.create_task_group() as tg:
            tg.start_soon(Worker(store.queue, app.runner).run)   # runtime.durable_worker
            await serve(app)

Modules: :mod:`.schema` (the file, its lock and versions), :mod:`.writer` (the writer thread and
its batches), :mod:`.store` (the TaskStore), :mod:`.queue` (the run queue), :mod:`.claims`,
:mod:`.seal` (push configs at rest), :mod:`.retention`, :mod:`.recovery`. docs/stores.md compares
it with the memory and Redis stores.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from ..claims import DEFAULT_CLAIM_WINDOW
from ..memory import DEFAULT_MAX_ENDED_BYTES
from ..retention import Retention
from ..sealing import Sealer, load_key
from .queue import SQLiteRunQueue
from .recovery import recover
from .schema import SCHEMA_VERSION, Database, StoreOpenError, open_database
from .store import SQLiteTaskStore


@asynccontextmanager
async def open_sqlite_store(
    path: str | Path,
    *,
    max_events_per_task: int = 10_000,
    max_ended_tasks: int = 10_000,
    max_ended_bytes: int = DEFAULT_MAX_ENDED_BYTES,
    retain: float | None = None,
    claim_window: float = DEFAULT_CLAIM_WINDOW,
    synchronous: str = "full",
    key_file: str | Path | None = None,
) -> AsyncIterator[SQLiteTaskStore]:
    """The SQLite store in the file ``path`` (created if missing) for the ``async with`` body.

    On entry it opens and locks the file, migrates an older schema, and recovers what a crash
    left (recovery.py); StoreOpenError (one line) if the file cannot be used. ``retain``:
    seconds an ended task is kept (None: by count and bytes only). ``key_file``: the key that
    seals push configs (default ``<path>.key``, created on first use). On exit it closes the
    file and releases the lock.
    """
    path = Path(path)
    db = await anyio.to_thread.run_sync(lambda: open_database(path, synchronous=synchronous))
    try:
        key_path = Path(key_file) if key_file is not None else path.with_name(path.name + ".key")
        try:
            key = await anyio.to_thread.run_sync(lambda: load_key(
                key_path, sealed=_one_sealed(db)))
        except (OSError, ValueError) as exc:
            raise StoreOpenError(str(exc) if isinstance(exc, ValueError)
                                 else f"cannot read or create the key file {key_path}: "
                                 f"{exc.strerror}") from None
        store = SQLiteTaskStore(
            db, Sealer(key), max_events_per_task=max_events_per_task,
            policy=Retention(retain, max_ended_tasks, max_ended_bytes, claim_window))
        store.queue = SQLiteRunQueue(store)
    except BaseException:
        db.close()
        raise
    try:
        # The writer's loop belongs to this context: it commits until the body is done, then
        # what is still queued, then the file is closed.
        async with anyio.create_task_group() as tg:
            await tg.start(store.writer.run)
            try:
                await recover(store, store.queue)
                yield store
            finally:
                store.writer.close()
    except BaseExceptionGroup as group:
        # The loop never raises: a lone error is the body's (or recovery's), raised as itself.
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0],
                                                         BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise
    finally:
        await store.aclose()


def _one_sealed(db: Database) -> bytes | None:
    """One push config as the file holds it (sealed), or None: what the key must open."""
    row = db.reader.execute("SELECT body FROM push LIMIT 1").fetchone()
    return None if row is None else bytes(row[0])


__all__ = ["SCHEMA_VERSION", "SQLiteRunQueue", "SQLiteTaskStore", "StoreOpenError",
           "open_sqlite_store"]
