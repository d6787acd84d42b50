"""Tasks and durable detached runs in PostgreSQL (``pip install 'scoped-a2a[postgres]'``;
``--store postgresql://...``).

::

    async with open_postgres_store("postgresql://app@db/agents") as store:
        app = A2AApp(agent, store=store)          # detached runs go to the durable queue
        async with anyio.create_task_group() as tg:
            tg.start_soon(Worker(store.queue, app.runner).run)   # runtime.durable_worker
            await serve(app)

Any number of processes on any machines may use one schema. Modules: :mod:`.connection` (the
pool driven on the event loop, errors, credentials), :mod:`.schema` (tables and versions),
:mod:`.listener` (LISTEN/NOTIFY wake-ups), :mod:`.core` (tasks, snapshots, appends),
:mod:`.appends` (running events batched; its statement's pieces:
:mod:`.batch_items`), :mod:`.store` (the TaskStore: reads, ListTasks,
claims, push configs), :mod:`.retention`, :mod:`.queue` (the run queue),
:mod:`.claims`, :mod:`.leases` (liveness leases of interactive runs), :mod:`.handover`
(follow-ups to the replica holding their run), :mod:`.unstarted` (creates whose commit was
lost), :mod:`.sealed` (the NOTIFY payloads replicas
obey, sealed). docs/postgres.md says what it keeps and how it fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import psycopg

from ...protocol.errors import ServerUnavailable
from ..claims import DEFAULT_CLAIM_WINDOW
from ..liveness import DEFAULT_LEASE, keep_alive, retire
from ..memory import DEFAULT_MAX_ENDED_BYTES
from ..retention import Retention
from ..sealing import Sealer, load_key
from .connection import Pool, connect, display, failure
from .handover import handover_sealer
from .listener import Listener, Waiters
from .queue import PostgresRunQueue
from .schema import SCHEMA_VERSION, StoreOpenError, prepare
from .sealed import SealedChannel, channel_sealer
from .store import PostgresTaskStore

DEFAULT_KEY_FILE = "scoped_a2a-postgres.key"
"""The push-config key file when none is given (in the working directory), unless
``SCOPED_A2A_POSTGRES_KEY_FILE`` names one."""


def _check(url: str, schema: str) -> bytes | None:
    """Connect, create or migrate the schema; one sealed push config (what the key must open).
    StoreOpenError (one line) when the database cannot be used. Blocking."""
    try:
        conn = connect(url, "public")
    except psycopg.Error as exc:
        raise StoreOpenError(failure(display(url), exc)) from None
    try:
        prepare(conn, schema)
        row = conn.execute(f'SELECT body FROM "{schema}".push LIMIT 1').fetchone()
        return None if row is None else bytes(row[0])
    except psycopg.Error as exc:
        raise StoreOpenError(failure(display(url), exc)) from None
    finally:
        conn.close()


@asynccontextmanager
async def open_postgres_store(
    url: str,
    *,
    schema: str = "scoped_a2a",
    pool_size: int = 12,
    max_events_per_task: int = 10_000,
    max_ended_tasks: int = 10_000,
    max_ended_bytes: int = DEFAULT_MAX_ENDED_BYTES,
    retain: float | None = None,
    claim_window: float = DEFAULT_CLAIM_WINDOW,
    key_file: str | Path | None = None,
    poll_interval: float = 5.0,
    sync_events: bool = False,
    lease: float = DEFAULT_LEASE,
) -> AsyncIterator[PostgresTaskStore]:
    """The PostgreSQL store for the ``async with`` body.

    On entry it connects, creates or migrates ``schema`` and starts listening for wake-ups;
    StoreOpenError (one line) if the database cannot be used (unreachable, bad credentials, a
    newer schema). ``key_file`` seals push configs (default ``$SCOPED_A2A_POSTGRES_KEY_FILE``
    or ./scoped_a2a-postgres.key, created 0600 on first use; every replica needs the same
    one). ``sync_events``: every event of a running task commits synchronously too (store.py,
    "Durability"). ``lease``: this process's liveness lease over its interactive runs
    (store/liveness.py): renewed every third of it while the body runs; other processes
    record its runs lost once it lapses, and the body records those of lapsed processes.
    While the body runs, a lost database makes calls raise ServerUnavailable and the store
    reconnects by itself. On exit the lease is retired (unless runs still name this process),
    the listener stops and the connections close.
    """
    pool = Pool(url, schema, pool_size)
    sealed = await anyio.to_thread.run_sync(lambda: _check(url, schema))
    key_path = Path(key_file or os.environ.get("SCOPED_A2A_POSTGRES_KEY_FILE")
                    or DEFAULT_KEY_FILE)
    try:
        key = await anyio.to_thread.run_sync(lambda: load_key(key_path, sealed=sealed))
    except (OSError, ValueError) as exc:
        raise StoreOpenError(str(exc) if isinstance(exc, ValueError)
                             else f"cannot read or create the key file {key_path}: "
                             f"{exc.strerror}") from None
    waiters = Waiters()
    store = PostgresTaskStore(
        pool, waiters, Sealer(key), max_events_per_task=max_events_per_task,
        policy=Retention(retain, max_ended_tasks, max_ended_bytes, claim_window),
        poll_interval=poll_interval, sync_events=sync_events, lease=lease,
        handover=handover_sealer(key))
    cancels = SealedChannel(channel_sealer(key, "cancel"), "cancel request")
    store.leases.cancels = cancels
    queue = PostgresRunQueue(store, cancels)
    store.queue = queue
    pool.on_broken = store.forget_local
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(Listener(url, schema, waiters, queue.on_cancel,
                                    store.handover.notified, own=pool.pids,
                                    on_reconnect=pool.close).run)
            store.handover.tg = tg
            await tg.start(store.batcher.run)
            # The lease row exists before the body can create a task naming this process: a
            # task whose process has no row would never be recorded lost.
            with contextlib.suppress(ServerUnavailable):
                await store.leases.beat()
            tg.start_soon(keep_alive, store, store.leases, name="scoped_a2a liveness lease")
            tg.start_soon(store.unstarted.run, name="scoped_a2a unstarted creates")
            try:
                yield store
            finally:
                store.handover.tg = None
                # Events handed over but not yet written go first (bounded: a database
                # that is gone fails them at once).
                with anyio.move_on_after(10, shield=True):
                    await store.batcher.flush()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0],
                                                         BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise
    finally:
        # Once the heartbeat has stopped: a renewal still under way would commit after
        # the retirement and bring the row back (it would then lapse on its own).
        await retire(store.leases, renewed=store.leases.renewed)
        await store.aclose()




__all__ = ["SCHEMA_VERSION", "PostgresRunQueue", "PostgresTaskStore", "StoreOpenError",
           "open_postgres_store"]
