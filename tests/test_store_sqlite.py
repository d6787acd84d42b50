"""The SQLite store in this process, on asyncio and trio.

The store contract runs over every store (memory, SQLite, and Redis when redis-server is
installed): the same events give the same positions, snapshots and pages; terminal states never
change; owners, ListTasks paging and filters, push configs and message claims behave alike.
Then what is SQLite's own: everything survives closing and reopening the file; push credentials
are not in the file in clear text; the run queue's leases, fencing and attempts; retention by
count, bytes and age with the file's space reused; and each fault at open is one clear line
that changes nothing on disk.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from scoped_a2a import MemoryTaskStore
from scoped_a2a.protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from scoped_a2a.protocol.types import (
    AuthenticationInfo,
    ListTasksRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from scoped_a2a.store.base import TaskEnded, TaskStore
from scoped_a2a.store.sqlite import StoreOpenError, open_sqlite_store
from scoped_a2a.store.sqlite.schema import SCHEMA_VERSION

from .redis.conftest import REDIS_SERVER, RedisServer
from .redis.test_redis_store import chunk, new_task, status, tick

pytestmark = pytest.mark.anyio
_encode = msgspec.json.encode


@asynccontextmanager
async def a_store(kind: str, tmp_path: Path) -> AsyncIterator[TaskStore]:
    if kind == "memory":
        yield MemoryTaskStore()
    elif kind == "sqlite":
        async with open_sqlite_store(tmp_path / "tasks.db") as store:
            yield store
    elif kind == "postgres":
        from scoped_a2a.store.postgres import open_postgres_store

        from .postgres.server import shared_server

        url = shared_server().database()
        async with open_postgres_store(url, key_file=tmp_path / "pg.key") as store:
            yield store
    else:
        if REDIS_SERVER is None:
            pytest.skip("redis-server is not installed")
        from scoped_a2a.store.redis import open_redis_store

        server = RedisServer(tmp_path)
        server.start()
        try:
            async with open_redis_store(server.url) as store:
                yield store
        finally:
            server.stop()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis", "postgres"])
async def test_the_store_contract(kind: str, tmp_path: Path) -> None:
    task = new_task()
    events = [status(task, TaskState.WORKING, "working"), chunk(task, "one ", append=False),
              tick(task, 0), chunk(task, "two", append=True), tick(task, 1),
              status(task, TaskState.COMPLETED, "done")]
    reference = MemoryTaskStore()
    async with a_store(kind, tmp_path) as store:
        await store.create(msgspec.structs.replace(task), owner="alice")
        await reference.create(msgspec.convert(msgspec.to_builtins(task), Task))
        for event in events:
            assert await store.append(task.id, event) == await reference.append(task.id, event)
        (got, pos), (want, _) = await store.get(task.id), await reference.get(task.id)
        assert pos == len(events) and _encode(got) == _encode(want)
        for after, kwargs in [(0, {}), (2, {}), (0, {"max_events": 2}), (0, {"max_bytes": 1}),
                              (len(events), {})]:
            page, ref = (await store.read(task.id, after, **kwargs),
                         await reference.read(task.id, after, **kwargs))
            assert [(e.position, e.encoded) for e in page.entries] == [
                (e.position, e.encoded) for e in ref.entries]
            assert (page.next, page.has_more) == (ref.next, ref.has_more)
        # Terminal states never change; unknown tasks are not found.
        with pytest.raises(TaskEnded):
            await store.append(task.id, status(task, TaskState.WORKING))
        assert (await store.get(task.id))[1] == len(events)
        for call in (store.get("no-such-task"), store.read("no-such-task", 0),
                     store.append("no-such-task", tick(task, 9))):
            with pytest.raises(TaskNotFound):
                await call
        with pytest.raises(InvalidParams):
            await store.create(msgspec.structs.replace(task))
        # Owners: another owner's task is "not found".
        assert await store.owner_of(task.id) == "alice"
        with pytest.raises(TaskNotFound):
            await store.check_owner(task.id, "bob")
        # ListTasks: newest first, paged, filtered by owner and context.
        more = [new_task("even" if i % 2 == 0 else "odd") for i in range(4)]
        for t in more:
            await store.create(t, owner="bob")
        seen, token = [], ""
        while True:
            page_ = await store.list_tasks(ListTasksRequest(page_size=2, page_token=token),
                                           owner="bob")
            assert page_.total_size == 4
            seen += [t.id for t in page_.tasks]
            token = page_.next_page_token
            if not token:
                break
        assert seen == [t.id for t in reversed(more)]
        even = await store.list_tasks(ListTasksRequest(context_id="even"))
        assert [t.id for t in even.tasks] == [more[2].id, more[0].id]
        # Push configs are kept with the task.
        cfg = TaskPushNotificationConfig(url="http://127.0.0.1:1/hook", id="p1", task_id=task.id,
                                         token="tok")
        await store.set_push_config(task.id, cfg)
        assert await store.push_configs(task.id) == [cfg]
        assert await store.delete_push_config(task.id, "p1") is True
        assert await store.delete_push_config(task.id, "p1") is False
        # Message claims: a second claim of the same message finds the first.
        if store.dedupes_sends:
            assert await store.claim_message("bob", "m1", b"fp", more[0].id, created=True) is None
            prior = await store.claim_message("bob", "m1", b"fp", "other")
            assert prior is not None and (prior.task_id, prior.created) == (more[0].id, True)


async def test_everything_survives_closing_and_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    task, running = new_task(), new_task()
    secret = "s3cr3t-" + uuid.uuid4().hex
    async with open_sqlite_store(path) as store:
        await store.create(task, owner="alice")
        for event in (status(task, TaskState.WORKING), chunk(task, "hi", append=False),
                      status(task, TaskState.COMPLETED, "done")):
            await store.append(task.id, event)
        await store.create(running, owner="bob")
        for i in range(100):  # more events than a snapshot is written after: folded on loading
            await store.append(running.id, chunk(running, f"{i},", append=i > 0))
        cfg = TaskPushNotificationConfig(
            url="http://127.0.0.1:1/hook", id="p1", task_id=task.id, token=secret,
            authentication=AuthenticationInfo(scheme="Bearer", credentials=secret))
        await store.set_push_config(task.id, cfg)
        assert await store.claim_message("alice", "m1", b"fp", task.id, created=True) is None
        before = _encode(await store.get(task.id))
        page_before = [(e.position, e.encoded) for e in (await store.read(task.id, 0)).entries]
    # The credentials are sealed: not in the file (nor its WAL) in clear text.
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("tasks.db"))
    assert secret.encode() not in raw
    async with open_sqlite_store(path) as store:
        assert _encode(await store.get(task.id)) == before
        assert [(e.position, e.encoded) for e in (await store.read(task.id, 0)).entries
                ] == page_before
        assert await store.owner_of(task.id) == "alice"
        assert await store.push_configs(task.id) == [cfg]
        prior = await store.claim_message("alice", "m1", b"fp", "again")
        assert prior is not None and prior.task_id == task.id
        # The interactive run that was in flight is recorded ended, saying why.
        got, pos = await store.get(running.id)
        assert got.status.state is TaskState.CANCELED and pos == 101
        assert got.artifacts is not None
        assert "".join(p.text or "" for p in got.artifacts[0].parts) == "".join(
            f"{i}," for i in range(100))
        assert got.status.message is not None
        assert "caller" in (got.status.message.parts[0].text or "")
    # Without its key file, or with another one, the store holding sealed configs is refused
    # at open (a new key would leave every config unreadable): nothing sent anywhere.
    os.replace(tmp_path / "tasks.db.key", tmp_path / "old.key")
    with pytest.raises(StoreOpenError, match="is missing"):
        async with open_sqlite_store(path):
            pass
    assert not (tmp_path / "tasks.db.key").exists()
    (tmp_path / "tasks.db.key").write_bytes(os.urandom(32))
    (tmp_path / "tasks.db.key").chmod(0o600)
    with pytest.raises(StoreOpenError, match="does not open"):
        async with open_sqlite_store(path):
            pass


async def test_the_run_queue_leases_fences_and_counts_attempts(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    task = new_task()
    assert task.history
    async with open_sqlite_store(path) as store:
        queue = store.queue
        await queue.submit(task, task.history[0], request_metadata={"k": "v"},
                           detach_reason="test", owner="alice")
        await queue.prepare()
        (job,) = await queue.read_new("w1", 10, 100)
        assert (job.task_id, job.request_metadata, job.owner) == (task.id, {"k": "v"}, "alice")
        attempt, snapshot = await queue.claim(job, "token-1", 60_000)
        assert attempt == 1 and snapshot is not None and snapshot.id == task.id
        assert (await queue.claim(job, "token-2", 60_000))[0] == -2  # never twice at once
        with store.fenced(task.id, "token-1"):
            await store.append(task.id, tick(task, 1))
        with store.fenced(task.id, "token-2"), pytest.raises(TaskEnded):
            await store.append(task.id, tick(task, 2))  # not the lease holder: refused
        assert await queue.renew(job, "w1", "token-1", 60_000) == 1
        assert await queue.renew(job, "w1", "token-2", 60_000) == -1
    # The process died with the run in flight: it is ready again, as attempt 2.
    async with open_sqlite_store(path) as store:
        queue = store.queue
        (job,) = await queue.read_new("w1", 10, 100)
        attempt, _ = await queue.claim(job, "token-3", 60_000)
        assert attempt == 2
        assert await queue.retire(job, "token-3") is False  # not ended: delivered again
        (job,) = await queue.read_new("w1", 10, 100)
        assert (await queue.claim(job, "token-3", 60_000))[0] == 3
        with store.fenced(task.id, "token-3"):
            await store.append(task.id, status(task, TaskState.COMPLETED, "done"))
        assert await queue.retire(job, "token-3") is True
        assert await queue.read_new("w1", 10, 10) == []
    async with open_sqlite_store(path) as store:
        assert await store.queue.read_new("w1", 10, 10) == []  # retired for good
        assert [e.position for e in (await store.read(task.id, 0)).entries] == [1, 2]


async def test_retention_by_count_bytes_and_age_reuses_the_space(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"

    async def ended(store: Any, n: int, pad: int = 0) -> list[Task]:
        tasks = [new_task() for _ in range(n)]
        for t in tasks:
            await store.create(t)
            if pad:
                await store.append(t.id, chunk(t, "x" * pad, append=False))
            await store.append(t.id, status(t, TaskState.COMPLETED))
        return tasks

    async with open_sqlite_store(path, max_ended_tasks=3) as store:
        running = new_task()
        await store.create(running)
        first = await ended(store, 5)
        for t in first[:2]:
            with pytest.raises(TaskNotFound):
                await store.get(t.id)  # oldest-ended first
        for t in first[2:]:
            await store.get(t.id)
        await store.get(running.id)  # running tasks are never deleted
    async with open_sqlite_store(path, max_ended_bytes=200_000) as store:
        def checkpoint(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        await ended(store, 40, pad=20_000)
        assert store.ended_bytes <= 200_000
        await store.writer.call(checkpoint)
        size = path.stat().st_size
        for _ in range(3):
            await ended(store, 40, pad=20_000)
        await store.writer.call(checkpoint)
        # The pages freed by deleted tasks are reused: the file does not keep growing.
        assert path.stat().st_size <= size * 1.5 + 100_000
    async with open_sqlite_store(path, retain=0.2) as store:
        old = await ended(store, 2)
        await anyio.sleep(0.5)
        await ended(store, 1)  # an end triggers the sweep
        for t in old:
            with pytest.raises(TaskNotFound):
                await store.get(t.id)


async def test_faults_at_open_are_one_line_and_change_nothing(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, but somebody's notes\n" * 10)
    with pytest.raises(StoreOpenError, match="not an SQLite database") as info:
        async with open_sqlite_store(junk):
            pass
    assert "\n" not in str(info.value)
    assert junk.read_bytes().startswith(b"this is not")  # untouched

    path = tmp_path / "tasks.db"
    task = new_task()
    async with open_sqlite_store(path) as store:
        await store.create(task)
        # A second opener (another process, or this one) is refused while it is held.
        with pytest.raises(StoreOpenError, match="in use by another process"):
            async with open_sqlite_store(path):
                pass
        await store.get(task.id)
    with sqlite3.connect(path) as conn:  # a newer scoped-a2a wrote this file
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreOpenError, match="newer scoped-a2a"):
        async with open_sqlite_store(path):
            pass
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM schema_version WHERE version > ?", (SCHEMA_VERSION,))
    async with open_sqlite_store(path) as store:
        await store.get(task.id)  # nothing was lost

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(StoreOpenError, match="another program"):
        async with open_sqlite_store(other):
            pass


def _mount_tmpfs(where: Path, options: str) -> bool:
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=10)


async def test_a_read_only_directory_and_a_full_disk_are_one_line_and_lose_nothing(
    tmp_path: Path,
) -> None:
    ro = tmp_path / "ro"
    if not _mount_tmpfs(ro, "ro,size=1m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with pytest.raises(StoreOpenError, match="read-only"):
            async with open_sqlite_store(ro / "tasks.db"):
                pass
    finally:
        _umount(ro)

    small = tmp_path / "small"
    if not _mount_tmpfs(small, "size=600k"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        path = small / "tasks.db"
        kept: list[Task] = []
        async with open_sqlite_store(path) as store:
            with pytest.raises(ServerUnavailable, match="disk is full"):
                for _ in range(1000):
                    task = new_task()
                    await store.create(task)
                    await store.append(task.id, chunk(task, "x" * 4000, append=False))
                    kept.append(task)
            assert kept
            # Acknowledged tasks still read; the store still answers.
            for task in kept[-3:]:
                await store.get(task.id)
        # Still full: the restart says so in one line (recording the interrupted runs needs
        # room); with room again it starts and finds every acknowledged task.
        try:
            async with open_sqlite_store(path):
                pass
        except StoreOpenError as exc:
            assert "full" in str(exc) and "\n" not in str(exc)
        subprocess.run(["mount", "-o", "remount,size=4m", str(small)], check=True, timeout=10)
        async with open_sqlite_store(path) as store:
            for task in kept:
                (await store.get(task.id))[0].id  # noqa: B018  # every acknowledged task is there
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        _umount(small)


async def test_a_file_of_the_first_schema_version_is_migrated_forward(tmp_path: Path) -> None:
    from scoped_a2a.store.sqlite.schema import MIGRATIONS

    path = tmp_path / "v1.db"
    task = new_task()
    done = msgspec.structs.replace(task, status=status(task, TaskState.COMPLETED).status)
    with sqlite3.connect(path) as conn:  # what version 1 wrote: a snapshot at every event
        for statement in MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (1, 0)")
        conn.execute("INSERT INTO tasks (id, owner, context_id, state, ts, last, snap, ended_at, "
                     "size) VALUES (?, 'alice', 'ctx', 'TASK_STATE_COMPLETED', NULL, 1, ?, 1, 9)",
                     (task.id, _encode(done)))
        conn.execute("INSERT INTO events VALUES (1, 1, ?, ?)",
                     (ord("s"), _encode(status(task, TaskState.COMPLETED))))
    async with open_sqlite_store(path) as store:
        got, pos = await store.get(task.id)
        assert got.status.state is TaskState.COMPLETED and pos == 1
        assert await store.owner_of(task.id) == "alice"
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 2
        assert conn.execute("SELECT snap_pos FROM tasks").fetchone()[0] == 1


async def test_identical_sends_racing_run_once_on_sqlite(tmp_path: Path) -> None:
    """Two identical sends at once (blocking and returnImmediately): one run, one task for
    both callers; the claim survives a restart (a resend then finds the same task)."""
    import httpx

    from scoped_a2a import A2AApp
    from scoped_a2a.runtime.durable_worker import Worker

    from .helpers import rpc, served, text_message
    from .test_exactly_once import Counting, send_params, wait_state

    agent = Counting()
    rounds = 30
    sent: list[dict[str, Any]] = []
    async with open_sqlite_store(tmp_path / "tasks.db") as store, \
            anyio.create_task_group() as nursery:
        app = A2AApp(agent, store=store, detached=nursery)
        nursery.start_soon(Worker(store.queue, app.runner).run)
        async with served(app) as url, httpx.AsyncClient(timeout=30) as a, \
                httpx.AsyncClient(timeout=30) as b:
            answers: dict[int, list[dict[str, Any]]] = {}

            async def one(client: httpx.AsyncClient, i: int, msg: dict[str, Any]) -> None:
                body = await rpc(client, url, "SendMessage",
                                 send_params(msg, detached=i % 2 == 1))
                answers.setdefault(i, []).append(body)

            for i in range(rounds):
                msg = text_message(f"round {i}")
                sent.append(msg)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(one, a, i, msg)
                    tg.start_soon(one, b, i, msg)
            for i in range(rounds):
                ids = {body["result"]["task"]["id"] for body in answers[i]}
                assert len(ids) == 1, answers[i]
                await wait_state(a, url, ids.pop(), "TASK_STATE_COMPLETED")
        nursery.cancel_scope.cancel()
    assert len(agent.starts) == rounds and set(agent.starts.values()) == {1}
    async with open_sqlite_store(tmp_path / "tasks.db") as store:
        app = A2AApp(agent, store=store)
        async with served(app) as url, httpx.AsyncClient(timeout=30) as a:
            again = await rpc(a, url, "SendMessage", send_params(sent[0]))
            assert again["result"]["task"]["id"] == agent.tasks["round 0"][0]
    assert set(agent.starts.values()) == {1}


async def test_claim_keys_of_deleted_claims_are_dropped_and_kept_ones_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scoped_a2a.store.sqlite import core

    monkeypatch.setattr(core, "CLAIM_KEYS_SLACK", 0)
    async with open_sqlite_store(tmp_path / "tasks.db", max_ended_tasks=2,
                                 claim_window=0) as store:
        tasks = [new_task() for _ in range(6)]
        for i, task in enumerate(tasks):
            assert await store.claim_message("o", f"m{i}", b"fp", task.id) is None
            await store.create(task)
            await store.append(task.id, status(task, TaskState.COMPLETED))
        assert len(store.claim_keys) <= 2 * 2 + 1  # the deleted tasks' keys went
        prior = await store.claim_message("o", "m5", b"fp", "again")
        assert prior is not None and prior.task_id == tasks[5].id  # a kept one is found


async def test_recently_ended_tasks_kept_in_memory_are_bounded_and_the_rest_read_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scoped_a2a.store.sqlite import core

    monkeypatch.setattr(core, "RECENT_BYTES", 100_000)
    monkeypatch.setattr(core, "RECENT_EVENTS", 4)
    async with open_sqlite_store(tmp_path / "tasks.db") as store:
        tasks = [new_task() for _ in range(10)]
        for task in tasks:
            await store.create(task)
            for i in range(10):
                await store.append(task.id, chunk(task, "x" * 2000, append=i > 0))
            await store.append(task.id, status(task, TaskState.COMPLETED))
        assert store._recent_bytes <= 100_000 and len(store._recent) < 10
        for task in tasks:  # every one still reads whole: from memory or from the file
            page = await store.read(task.id, 0)
            assert [e.position for e in page.entries] == list(range(1, 12))
            got, _ = await store.get(task.id)
            assert got.artifacts is not None and len(got.artifacts[0].parts) == 10
