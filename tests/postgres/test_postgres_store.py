"""The PostgreSQL store in process, on a real PostgreSQL server, on asyncio and trio.

Two stores on one database stand for two replicas: a waiter on one is woken by the other's
append through LISTEN/NOTIFY (its fallback poll is an hour, so only a notification can wake it);
appends from both interleave with one position sequence; a message claimed on one is found on
the other; a queued run is taken by one worker only. Push configs are sealed in the database;
retention deletes ended tasks by age and count; a newer schema and another program's tables are
refused with one line; schemas keep apps apart.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import psycopg
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.types import (
    Message,
    Part,
    Role,
    TaskPushNotificationConfig,
    TaskState,
)
from scoped_a2a.store.base import TaskEnded
from scoped_a2a.store.claims import AlreadyClaimed, NewClaim, claim_key
from scoped_a2a.store.postgres import StoreOpenError, open_postgres_store
from scoped_a2a.store.postgres.store import PostgresTaskStore

from ..helpers import rpc, served, text_message
from ..redis.test_redis_store import chunk, new_task, status, tick
from ..test_exactly_once import Counting, send_params, wait_state

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def two(url: str, tmp_path: Path, **kw: Any
              ) -> AsyncIterator[tuple[PostgresTaskStore, PostgresTaskStore]]:
    key = tmp_path / "push.key"
    async with open_postgres_store(url, key_file=key, **kw) as a, \
            open_postgres_store(url, key_file=key, **kw) as b:
        yield a, b


async def test_a_waiter_on_one_replica_is_woken_by_the_others_append(
    pg_url: str, tmp_path: Path,
) -> None:
    async with two(pg_url, tmp_path, poll_interval=3600) as (a, b):
        task = new_task()
        await a.create(task)
        page = await b.read(task.id, 0)
        assert page.entries == [] and page.next == 0
        woken = anyio.Event()

        async def waiter() -> None:
            await b.wait(task.id, 0)  # only a NOTIFY from a's commit can end this
            woken.set()

        with anyio.fail_after(30):  # a hang guard, not a timing assertion
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.sleep(0.05)
                assert not woken.is_set()
                await a.append(task.id, status(task, TaskState.WORKING, "go"))
        page = await b.read(task.id, 0)
        assert [e.position for e in page.entries] == [1]
        assert page.task.status.state == TaskState.WORKING


async def test_appends_from_two_replicas_take_one_position_sequence(
    pg_url: str, tmp_path: Path,
) -> None:
    async with two(pg_url, tmp_path) as (a, b), \
            open_postgres_store(pg_url, key_file=tmp_path / "push.key") as runner:
        # Created on a third replica, which runs it: a and b wait for each commit.
        task = new_task()
        await runner.create(task)
        got: list[int] = []

        async def writer(store: PostgresTaskStore, base: int) -> None:
            for i in range(20):
                got.append(await store.append(task.id, tick(task, base + i)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, a, 0)
            tg.start_soon(writer, b, 100)
        assert sorted(got) == list(range(1, 41))
        # The replica running it does not wait for its running events; once it has heard of
        # the others' writes it goes on after them, at the positions it returned.
        with anyio.fail_after(30):  # a hang guard: the NOTIFY of position 40
            while runner.waiters.known.get(task.id, -1) < 40:
                await anyio.sleep(0.01)
        mine = [await runner.append(task.id, tick(task, 1000 + i)) for i in range(100)]
        assert mine == list(range(41, 141))
        await runner.batcher.flush()
        page = await a.read(task.id, 40, max_events=1000)
        assert [(e.position, e.event.data["i"]) for e in page.entries] == [  # type: ignore[union-attr]
            (41 + i, 1000 + i) for i in range(100)]
        await b.append(task.id, status(task, TaskState.COMPLETED, "done"))
        with pytest.raises(TaskEnded):  # terminal on b: refused on a, whatever a cached
            await a.append(task.id, status(task, TaskState.WORKING))
        snap, pos = await a.get(task.id)
        assert pos == 141 and snap.status.state == TaskState.COMPLETED
        page = await a.read(task.id, 0, max_events=40)
        assert sorted(e.event.data["i"] for e in page.entries) == (
            list(range(20)) + list(range(100, 120)))


async def test_a_message_claimed_on_one_replica_is_found_on_the_other(
    pg_url: str, tmp_path: Path,
) -> None:
    async with two(pg_url, tmp_path) as (a, b):
        task = new_task()
        assert await a.claim_message("alice", "m1", b"fp", task.id) is None
        prior = await b.claim_message("alice", "m1", b"fp", "other-task")
        assert prior is not None and (prior.task_id, prior.created) == (task.id, False)
        await a.create(task, owner="alice")  # the pending claim is made with its task
        prior = await b.claim_message("alice", "m1", b"fp", "other-task")
        assert prior is not None and (prior.task_id, prior.created) == (task.id, True)
        # Another owner's same messageId is its own send.
        assert await b.claim_message("bob", "m1", b"fp", "bobs-task") is None


async def test_a_new_tasks_claim_is_made_by_its_create_and_a_held_one_stores_nothing(
    pg_url: str, tmp_path: Path,
) -> None:
    # One statement claims the messageId and stores the task (store.create_claimed): the claim
    # is made at once (never pending), seen by the other replica; a second create of the same
    # message, on either replica, stores nothing and says so (AlreadyClaimed).
    async with two(pg_url, tmp_path) as (a, b):
        assert a.claims_on_create
        task, again, other = new_task(), new_task(), new_task()
        await a.create_claimed(task, NewClaim("m1", b"fp"), owner="alice")
        prior = await b.claim_message("alice", "m1", b"fp", "x")
        assert prior is not None and (prior.task_id, prior.created) == (task.id, True)
        for store in (a, b):
            with pytest.raises(AlreadyClaimed):
                await store.create_claimed(again, NewClaim("m1", b"fp"), owner="alice")
        with pytest.raises(TaskNotFound):
            await b.get(again.id)
        # Another owner's messageId is its own; the first task is as it was created.
        await b.create_claimed(other, NewClaim("m1", b"fp"), owner="bob")
        assert (await b.get(other.id))[0].status.state is TaskState.SUBMITTED
        assert (await b.get(task.id))[0].id == task.id
        # A claim pending past its window whose task never came (its sender died) stores
        # nothing either: the claim path (claim_message) deletes the lapsed one and claims.
        with psycopg.connect(pg_url) as conn:
            conn.execute("INSERT INTO scoped_a2a.claims VALUES (%s, %s, 'gone', 0, 0, NULL)",
                         (claim_key("alice", "m2"), b"fp"))
        with pytest.raises(AlreadyClaimed):
            await a.create_claimed(again, NewClaim("m2", b"fp"), owner="alice")
        assert await a.claim_message("alice", "m2", b"fp", again.id) is None
        await a.create(again, owner="alice")
        prior = await b.claim_message("alice", "m2", b"fp", "x")
        assert prior is not None and (prior.task_id, prior.created) == (again.id, True)


@pytest.mark.one_python  # suite time: store behaviour, one Python is enough
async def test_identical_sends_on_two_replicas_run_once(pg_url: str, tmp_path: Path) -> None:
    """Two identical blocking sends at once, one to each replica (served through hypercorn):
    one run, one task for both callers, whichever create claims first; a later resend
    answers with that task; the messageId with another message is refused."""
    agent = Counting()
    rounds = 20
    async with two(pg_url, tmp_path) as (a, b), anyio.create_task_group() as nursery:
        apps = [A2AApp(agent, store=s, detached=nursery) for s in (a, b)]
        async with served(apps[0]) as url_a, served(apps[1]) as url_b, \
                httpx.AsyncClient(timeout=30) as client:
            answers: dict[int, list[dict[str, Any]]] = {}

            async def one(url: str, i: int, msg: dict[str, Any]) -> None:
                body = await rpc(client, url, "SendMessage", send_params(msg))
                answers.setdefault(i, []).append(body)

            sent = []
            for i in range(rounds):
                msg = text_message(f"round {i}")
                sent.append(msg)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(one, url_a, i, msg)
                    tg.start_soon(one, url_b, i, msg)
            for i in range(rounds):
                ids = {body["result"]["task"]["id"] for body in answers[i]}
                assert len(ids) == 1, answers[i]
                await wait_state(client, url_a, ids.pop(), "TASK_STATE_COMPLETED")
            again = await rpc(client, url_b, "SendMessage", send_params(sent[0]))
            assert again["result"]["task"]["id"] == agent.tasks["round 0"][0], again
            other = dict(sent[1], parts=[{"text": "something else"}])
            refused = await rpc(client, url_a, "SendMessage", send_params(other))
            assert refused["error"]["code"] == -32602, refused
        nursery.cancel_scope.cancel()
    assert len(agent.starts) == rounds and set(agent.starts.values()) == {1}, agent.starts


async def test_a_queued_run_is_taken_by_one_worker_and_its_lease_fences_the_other(
    pg_url: str, tmp_path: Path,
) -> None:
    async with two(pg_url, tmp_path) as (a, b):
        task = new_task()
        msg = Message(message_id="m", role=Role.USER, parts=[Part(text="go")])
        await a.queue.submit(task, msg, request_metadata=None, detach_reason="test")
        got_a, got_b = await a.queue.read_new("wa", 10, 10), await b.queue.read_new("wb", 10, 10)
        assert len(got_a) + len(got_b) == 1
        job = (got_a or got_b)[0]
        attempt, snap = await a.queue.claim(job, "token-a", 30_000)
        assert attempt == 1 and snap is not None and snap.id == task.id
        assert await b.queue.claim(job, "token-b", 30_000) == (-2, None)  # held by a
        with b.queue.fenced(task.id, "token-b"), pytest.raises(TaskEnded):
            await b.append(task.id, tick(task, 0))  # not b's lease: records nothing
        with a.queue.fenced(task.id, "token-a"):
            await a.append(task.id, status(task, TaskState.COMPLETED, "done"))
        assert await a.queue.retire(job, "token-a") is True
        assert await b.queue.read_new("wb", 10, 10) == []
        assert await b.queue.reclaim("wb", 10, 0) == []


async def test_push_configs_are_sealed_in_the_database(pg_url: str, tmp_path: Path) -> None:
    secret = "s3cr3t-token-value"
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store:
        task = new_task()
        await store.create(task)
        cfg = TaskPushNotificationConfig(url="http://127.0.0.1:1/hook", id="p1",
                                         task_id=task.id, token=secret)
        await store.set_push_config(task.id, cfg)
        assert await store.push_configs(task.id) == [cfg]
    with psycopg.connect(pg_url) as conn:
        (body,) = conn.execute("SELECT body FROM scoped_a2a.push").fetchone()  # type: ignore[misc]
    assert secret.encode() not in bytes(body)
    # A missing key file is not made afresh, and another key cannot open them: both are
    # refused at start-up with one line.
    with pytest.raises(StoreOpenError, match="is missing"):
        async with open_postgres_store(pg_url, key_file=tmp_path / "other"):
            pass
    (tmp_path / "other").write_bytes(os.urandom(32))
    (tmp_path / "other").chmod(0o600)
    with pytest.raises(StoreOpenError, match="does not open the push configs"):
        async with open_postgres_store(pg_url, key_file=tmp_path / "other"):
            pass


async def test_retention_deletes_ended_tasks_by_count_and_age(
    pg_url: str, tmp_path: Path,
) -> None:
    async with open_postgres_store(pg_url, key_file=tmp_path / "k", max_ended_tasks=2,
                                   retain=3600) as store:
        ids = []
        for _ in range(4):
            task = new_task()
            await store.create(task)
            await store.append(task.id, status(task, TaskState.COMPLETED, "done"))
            ids.append(task.id)
        running = new_task()
        await store.create(running)
        await store.sweep()
        for gone in ids[:2]:
            with pytest.raises(TaskNotFound):
                await store.get(gone)
        for kept in (*ids[2:], running.id):
            await store.get(kept)
    async with open_postgres_store(pg_url, key_file=tmp_path / "k", retain=0.01) as store:
        await anyio.sleep(0.05)
        assert await store.sweep() == 2
        await store.get(running.id)  # running tasks are never deleted
        for gone in ids[2:]:
            with pytest.raises(TaskNotFound):
                await store.get(gone)


async def test_a_newer_schema_and_foreign_tables_are_refused_and_schemas_keep_apps_apart(
    pg_url: str, tmp_path: Path,
) -> None:
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store:
        task = new_task()
        await store.create(task)
    async with open_postgres_store(pg_url, key_file=tmp_path / "k", schema="app_two") as other:
        with pytest.raises(TaskNotFound):
            await other.get(task.id)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO scoped_a2a.schema_version (version) VALUES (99)")
        conn.execute("CREATE SCHEMA foreign_app; CREATE TABLE foreign_app.t (x int)")
    with pytest.raises(StoreOpenError, match=r"newer scoped-a2a \(schema version 99"):
        async with open_postgres_store(pg_url, key_file=tmp_path / "k"):
            pass
    with pytest.raises(StoreOpenError, match="another program's tables"):
        async with open_postgres_store(pg_url, key_file=tmp_path / "k", schema="foreign_app"):
            pass
    with psycopg.connect(pg_url) as conn:  # refused: nothing was changed
        rows = conn.execute("SELECT max(version) FROM scoped_a2a.schema_version").fetchone()
        assert rows == (99,)


async def test_a_version_2_schema_is_migrated_and_deleted_tasks_take_their_events(
    pg_url: str, tmp_path: Path,
) -> None:
    # Version 3 dropped the events' foreign key (checked at every event inserted); a trigger
    # deletes a deleted task's events instead, whoever deletes it.
    from scoped_a2a.store.postgres.schema import MIGRATIONS, SCHEMA_VERSION

    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
        conn.execute("CREATE SCHEMA old_app; SET LOCAL search_path TO old_app")
        for version in (1, 2):
            for statement in MIGRATIONS[version]:
                conn.execute(statement.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    kept, swept, by_hand = new_task(), new_task(), new_task()
    async with open_postgres_store(pg_url, key_file=tmp_path / "k", schema="old_app",
                                   max_ended_tasks=1) as store:
        for task in (swept, by_hand, kept):
            await store.create(task)
            for i in range(3):
                await store.append(task.id, tick(task, i))
        for task in (swept, kept):
            await store.append(task.id, status(task, TaskState.COMPLETED, "done"))
        assert await store.sweep() == 1
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DELETE FROM old_app.tasks WHERE id = %s", (by_hand.id,))
            version = conn.execute("SELECT max(version) FROM old_app.schema_version").fetchone()
            keys = conn.execute("SELECT conname FROM pg_constraint WHERE conrelid = "
                                "'old_app.events'::regclass AND contype = 'f'").fetchall()
            left = conn.execute("SELECT t.id, count(*) FROM old_app.events e LEFT JOIN "
                                "old_app.tasks t ON t.seq = e.task GROUP BY t.id").fetchall()
        assert version == (SCHEMA_VERSION,) and SCHEMA_VERSION >= 3 and keys == []
        assert left == [(kept.id, 4)], f"events left, by task (None: a deleted task): {left}"
        page = await store.read(kept.id, 0)
        assert [e.position for e in page.entries] == [1, 2, 3, 4]


class _Run:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.cancelled = anyio.Event()

    def cancel(self, reason: str) -> None:
        self.reasons.append(reason)
        self.cancelled.set()


class _Runner:
    def __init__(self, runs: dict[str, _Run]) -> None:
        self.runs = runs

    def get(self, task_id: str) -> _Run | None:
        return self.runs.get(task_id)


async def test_a_cancel_on_one_replica_reaches_the_run_on_the_other_and_forged_ones_are_dropped(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    from scoped_a2a.store.postgres.sealed import SealedChannel, channel_sealer

    async with two(pg_url, tmp_path) as (a, b):
        run, other = _Run(), _Run()
        runner = _Runner({"t-1": run, "t-3": other})
        b.queue.bind(runner)
        # Any role of the database may NOTIFY on the cancel channel: a bare task id, one
        # sealed with another key file, and a payload sealed for the hand-over channel are
        # all dropped (logged), and the run goes on.
        stranger = SealedChannel(channel_sealer(os.urandom(32), "cancel"), "cancel request")
        for forged in ("t-1", "not base64!", stranger.wrap(b"t-1"),
                       b.handover.sealed.wrap(b"t-1")):
            await a.pool.run(lambda c, f=forged: c.execute(
                "SELECT pg_notify(%s, %s)", (a.queue.cancel_channel, f)))
        await a.queue.cancel_elsewhere("t-2")  # a run b does not hold: nothing happens
        await a.queue.cancel_elsewhere("t-3")
        with anyio.fail_after(30):  # a hang guard: only b's listener can deliver it
            await other.cancelled.wait()
        # Notifications reach b's listener in the order they were sent: the forged ones
        # were handled before the genuine one.
        assert run.reasons == [] and other.reasons == ["CancelTask"]
        dropped = [r.getMessage() for r in caplog.records if "dropped a cancel" in
                   r.getMessage()]
        # One line per listener (a's and b's), however many were dropped: at most one a minute.
        assert 1 <= len(dropped) <= 2, dropped
        await a.queue.cancel_elsewhere("t-1")
        with anyio.fail_after(30):
            await run.cancelled.wait()
        assert run.reasons == ["CancelTask"]


async def test_forged_references_to_large_envelopes_cost_no_query_and_replays_are_bounded(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A large hand-over envelope goes through the ``handover`` table, the NOTIFY naming its
    row. Any role able to connect may NOTIFY: a reference it forges made every process run a
    query for it, each queued for the pool's connections (a flood starved the store); a
    reference seen on the channel and replayed, too. Now forged ones are dropped at their seal
    (no query) and at most MAX_FETCHING are read at once (more are dropped, logged)."""
    from scoped_a2a.store.postgres.handover import MAX_FETCHING

    async with two(pg_url, tmp_path) as (a, b):
        got: list[bytes] = []
        b.handover.listen(got.append)
        refs: list[str] = []  # the references that opened at b
        unwrap = b.handover.sealed.unwrap

        def recording(text: str) -> bytes | None:
            opened = unwrap(text)
            if opened is not None and len(text) < 200:
                refs.append(text)
            return opened

        fetch = b.handover._fetch
        calls, now, most = 0, 0, 0

        async def counting(ref: str) -> None:
            nonlocal calls, now, most
            calls, now = calls + 1, now + 1
            most = max(most, now)
            try:
                await fetch(ref)
            finally:
                now -= 1

        b.handover.sealed.unwrap = recording  # type: ignore[method-assign]
        b.handover._fetch = counting  # type: ignore[method-assign]
        channel = a.handover.channel
        await a.pool.run(lambda c: c.execute(
            "SELECT pg_notify(%s, '* @' || g) FROM generate_series(1, 2000) g", (channel,)))
        await a.pool.run(lambda c: c.execute("SELECT pg_notify(%s, %s)",
                                             (channel, f"* @{new_task().id}")))
        big = b"x" * 20_000
        await a.handover.send(None, big)
        with anyio.fail_after(30):  # the forged ones came first (in order), then this one
            while big not in got:
                await anyio.sleep(0.02)
        assert calls == 1, calls  # the genuine one only
        dropped = [r.getMessage() for r in caplog.records
                   if "dropped a hand-over envelope that" in r.getMessage()]
        assert 1 <= len(dropped) <= 2, dropped  # one line per listener (a's and b's)
        # Replayed from the channel (its row is kept a minute), each in a transaction of its
        # own (PostgreSQL folds identical notifications of one transaction into one), while
        # the table is locked so no read ends: at most MAX_FETCHING wait, the rest dropped.
        assert len(refs) == 1, refs
        locked, release = anyio.Event(), anyio.Event()

        async def lock(conn: Any) -> None:
            await conn.execute("LOCK TABLE handover IN ACCESS EXCLUSIVE MODE")
            locked.set()
            await release.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(a.pool.run, lock)
            try:  # the lock's holder runs shielded (pool.run): it ends only once released
                with anyio.fail_after(30):
                    await locked.wait()
                for _ in range(3 * MAX_FETCHING):
                    await a.pool.run(lambda c: c.execute("SELECT pg_notify(%s, %s)",
                                                         (channel, f"* @{refs[0]}")))
                # Both replicas read the replays and log what they drop: wait for b's reads
                # too (a's log line alone came first under load, before b had read them).
                with anyio.fail_after(30):
                    while calls < 1 + MAX_FETCHING or not any(
                            "large ones were being read already" in r.getMessage()
                            for r in caplog.records):
                        await anyio.sleep(0.02)
                await anyio.sleep(0.2)  # the replays still coming are dropped, not read
                assert (calls, most) == (1 + MAX_FETCHING, MAX_FETCHING), (calls, most)
            finally:
                release.set()
        with anyio.fail_after(30):
            while b.handover.fetching:
                await anyio.sleep(0.02)
        assert got.count(big) == 1 + MAX_FETCHING  # replays are not detected (documented)


async def test_each_log_keeps_its_last_events_and_pages_are_bounded_on_every_replica(
    pg_url: str, tmp_path: Path,
) -> None:
    async with two(pg_url, tmp_path, max_events_per_task=3) as (a, b):
        task = new_task()
        await a.create(task)
        for i in range(5):
            await a.append(task.id, tick(task, i))
        await a.batcher.flush()  # a's running events are visible once written
        for store in (a, b):  # a answers from what it appended, b from the database
            page = await store.read(task.id, 0)
            assert [e.position for e in page.entries] == [3, 4, 5], store
            assert (page.first_retained, page.next, page.has_more) == (3, 5, False)
            page = await store.read(task.id, 0, max_events=2)
            assert [e.position for e in page.entries] == [3, 4] and page.has_more
            page = await store.read(task.id, 3, max_bytes=1)  # the first is always returned
            assert [e.position for e in page.entries] == [4] and page.has_more
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute("SELECT pos FROM scoped_a2a.events ORDER BY pos").fetchall()
        assert rows == [(3,), (4,), (5,)]


async def test_cut_connections_and_a_read_only_server_are_clear_errors_and_heal(
    pg_url: str, tmp_path: Path,
) -> None:
    from scoped_a2a.protocol.errors import ServerUnavailable

    from .server import shared_server

    server = shared_server()
    database = pg_url.rsplit("/", 1)[1]
    cut = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
           f"WHERE datname = '{database}' AND pid <> pg_backend_pid()")
    async with open_postgres_store(pg_url, key_file=tmp_path / "k",
                                   poll_interval=3600) as store:
        task = new_task()
        await store.create(task)
        # Every connection cut by the server (the listener's too): a read retries on a fresh
        # connection at once; the listener reconnects by itself.
        await anyio.to_thread.run_sync(server.psql, cut)
        assert (await store.get(task.id))[1] == 0
        # A server that went read-only (a standby): writes say so, reads go on.
        await anyio.to_thread.run_sync(
            server.psql, f"ALTER DATABASE {database} SET default_transaction_read_only = on")
        await anyio.to_thread.run_sync(server.psql, cut)
        # A running event of a run here is not waited for: its failed write is told at the
        # run's next append, which is then waited for.
        await store.append(task.id, tick(task, 0))
        await store.batcher.flush()
        with pytest.raises(ServerUnavailable, match=r"read-only|cannot be reached"):
            await store.append(task.id, tick(task, 0))
        with pytest.raises(ServerUnavailable, match="read-only"):
            await store.append(task.id, tick(task, 0))
        assert (await store.get(task.id))[1] == 0  # nothing half-written
        await anyio.to_thread.run_sync(
            server.psql, f"ALTER DATABASE {database} SET default_transaction_read_only = off")
        await anyio.to_thread.run_sync(server.psql, cut)
        with anyio.fail_after(30):
            while True:
                try:
                    assert await store.append(task.id, tick(task, 0)) == 1
                    break
                except ServerUnavailable:
                    await anyio.sleep(0.1)
        # The listener is back: a waiter is woken by another replica's append (only its
        # notification can wake it: the fallback poll is an hour).
        with anyio.fail_after(30):
            while not store.waiters.listening:
                await anyio.sleep(0.05)
        async with open_postgres_store(pg_url, key_file=tmp_path / "k") as other, \
                anyio.create_task_group() as tg:
            tg.start_soon(other.append, task.id, tick(task, 1))
            with anyio.fail_after(30):
                await store.wait(task.id, 1)
        assert (await store.get(task.id))[1] == 2


async def test_prepared_statements_survive_a_rolled_back_transaction(pg_url: str) -> None:
    # psycopg prepares a statement run often enough through its cursor, and on a ROLLBACK it
    # sees (also a failed transaction's COMMIT answer) drops its own with DEALLOCATE ALL,
    # which took this connection's Prepared ones (a send's create and end) with them: the next
    # create failed with InvalidSqlStatementName (a hostile caller's rolled-back operation on
    # a replica, then every send through that connection). Found under load in
    # tests/fleet/test_fleet_hostile.py.
    from scoped_a2a.store.postgres.connection import Pool
    from scoped_a2a.store.postgres.prepared import Prepared

    pool = Pool(pg_url, "public", 1)
    try:
        double = Prepared("double", "SELECT %s * 2", ["int8"])
        assert await pool.run(lambda c: c.prepared(double, [2]), transaction=False) == [(b"4",)]
        for _ in range(8):  # past psycopg's prepare threshold: it holds a statement of its own
            await pool.run(lambda c: c.one("SELECT 1"), transaction=False)

        async def fails(c: Any) -> None:
            await c.one("SELECT 1")
            raise LookupError("rolled back")

        for _ in range(2):
            with pytest.raises(LookupError):
                await pool.run(fails)  # a transaction: rolled back
            for _ in range(8):
                await pool.run(lambda c: c.one("SELECT 1"), transaction=False)
            # Inside a transaction and by itself: still prepared, or prepared again.
            assert await pool.run(lambda c: c.prepared(double, [3])) == [(b"6",)]
            assert await pool.run(lambda c: c.prepared(double, [4]), transaction=False) \
                == [(b"8",)]
        # Dropped on the server by someone else: prepared again at once outside a transaction;
        # inside one, that transaction fails (rolled back) and the next prepares it again.
        await pool.run(lambda c: c.execute("DEALLOCATE ALL"), transaction=False)
        assert await pool.run(lambda c: c.prepared(double, [5]), transaction=False) == [(b"10",)]
        await pool.run(lambda c: c.execute("DEALLOCATE ALL"), transaction=False)
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            await pool.run(lambda c: c.prepared(double, [6]))
        assert await pool.run(lambda c: c.prepared(double, [7])) == [(b"14",)]
    finally:
        pool.close()


async def test_prepared_statements_take_every_type_and_fail_as_psycopgs_do(
    pg_url: str, tmp_path: Path,
) -> None:
    # prepared.Prepared (a send's create and end): parameters of each type and NULLs go in
    # and come back in PostgreSQL's text form; errors are psycopg's classes, so the pool
    # maps them as before; a connection cut under it fails clearly and a new one prepares
    # the statement again.
    from psycopg import errors as pgerrors

    from scoped_a2a.protocol.errors import ServerUnavailable
    from scoped_a2a.store.postgres.connection import Pool
    from scoped_a2a.store.postgres.prepared import Prepared

    from .server import shared_server

    pool = Pool(pg_url, "public", 1)
    every = Prepared("every", "SELECT %s, %s, %s, %s, %s, %s, %s",
                     ["bool", "bytea", "int8", "int2", "text", "float8", "text"])
    for _ in range(2):  # prepared at the first use, reused at the second
        rows = await pool.run(lambda c: c.prepared(
            every, [True, b"\x00\xff", -2**40, 7, "é'\"", 0.5, None]), transaction=False)
        assert rows == [(b"t", b"\\x00ff", str(-2**40).encode(), b"7", "é'\"".encode(),
                         b"0.5", None)]
    await pool.run(lambda c: c.execute("CREATE TABLE p (k text PRIMARY KEY)"),
                   transaction=False)
    insert = Prepared("insert", "INSERT INTO p VALUES (%s) RETURNING k", ["text"])
    assert await pool.run(lambda c: c.prepared(insert, ["a"]), transaction=False) == [(b"a",)]
    with pytest.raises(pgerrors.UniqueViolation):
        await pool.run(lambda c: c.prepared(insert, ["a"]), transaction=False)
    database = pg_url.rsplit("/", 1)[1]
    await anyio.to_thread.run_sync(shared_server().psql, (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"))
    with pytest.raises(ServerUnavailable, match=r"cannot be reached|may or may not"):
        await pool.run(lambda c: c.prepared(insert, ["b"]), transaction=False)
    assert await pool.run(lambda c: c.prepared(insert, ["c"]), transaction=False) == [(b"c",)]
    pool.close()
    # Through the store: a read-only server says so, and the task is not stored.
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store:
        await anyio.to_thread.run_sync(shared_server().psql, (
            f"ALTER DATABASE {database} SET default_transaction_read_only = on; "
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"))
        task = new_task()
        try:
            with anyio.fail_after(30):
                while True:
                    try:
                        await store.create_claimed(task, NewClaim("m", b"fp"))
                    except ServerUnavailable as exc:
                        if "read-only" in str(exc):
                            break
        finally:
            await anyio.to_thread.run_sync(shared_server().psql, (
                f"ALTER DATABASE {database} SET default_transaction_read_only = off"))
        with pytest.raises(TaskNotFound):
            await store.get(task.id)


async def test_snapshots_between_their_writes_are_folded_by_every_reader(
    pg_url: str, tmp_path: Path,
) -> None:
    from scoped_a2a.protocol.types import ListTasksRequest
    from scoped_a2a.store.memory import MemoryTaskStore

    from ..redis.test_redis_store import chunk

    task = new_task()
    reference = MemoryTaskStore()
    await reference.create(msgspec.convert(msgspec.to_builtins(task), type(task)))
    async with two(pg_url, tmp_path) as (a, b):
        await a.create(task)
        events = [status(task, TaskState.WORKING, "w"), chunk(task, "0", append=False)]
        events += [chunk(task, f" {i}", append=True) for i in range(1, 150)]
        for event in events:
            assert await a.append(task.id, event) == await reference.append(task.id, event)
        await a.batcher.flush()  # a's running events are visible elsewhere once written
        want = msgspec.json.encode((await reference.get(task.id))[0])
        # b holds no snapshot: it reads the one written with a's last batch and folds the
        # rest (none, or the events of a later batch).
        assert msgspec.json.encode((await b.get(task.id))[0]) == want
        assert msgspec.json.encode((await b.read(task.id, 140)).task) == want
        listed = await b.list_tasks(ListTasksRequest())
        assert [msgspec.json.encode(t) for t in listed.tasks] == [want]
        # b appends next: it folds from the stored snapshot too.
        end = status(task, TaskState.COMPLETED, "done")
        assert await b.append(task.id, end) == await reference.append(task.id, end)
        want = msgspec.json.encode((await reference.get(task.id))[0])
        assert msgspec.json.encode((await a.get(task.id))[0]) == want
    with psycopg.connect(pg_url) as conn:  # the end writes one
        row = conn.execute("SELECT snap_pos, last FROM scoped_a2a.tasks").fetchone()
        assert row == (152, 152)


async def test_a_due_snapshot_goes_with_its_batch_and_one_not_held_is_read_first(
    pg_url: str, tmp_path: Path,
) -> None:
    from scoped_a2a.store.memory import MemoryTaskStore

    task = new_task()
    reference = MemoryTaskStore()
    await reference.create(msgspec.convert(msgspec.to_builtins(task), type(task)))

    def stored() -> tuple[int, int, bytes]:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT snap_pos, last, snap FROM scoped_a2a.tasks").fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), bytes(row[2])

    async def both(event: Any) -> None:
        assert await a.append(task.id, event) == await reference.append(task.id, event)

    async with two(pg_url, tmp_path) as (a, b):
        full = 0
        take_full = a._append_full

        async def counted(*args: Any) -> Any:
            nonlocal full
            full += 1
            return await take_full(*args)

        a._append_full = counted  # type: ignore[method-assign]
        await a.create(task)
        await both(status(task, TaskState.WORKING, "w"))
        for i in range(100):  # not waited for: one batch, past the snapshot's 64 events
            await both(chunk(task, f"{i} ", append=i > 0))
        await a.batcher.flush()
        want = msgspec.json.encode((await reference.get(task.id))[0])
        # The snapshot was written by the batch, at its last event (the full path wrote it
        # at event 64, with a statement of its own, the run waiting for it).
        assert stored() == (101, 101, want) and full == 0
        # The process drops what it holds (as when a connection breaks mid-operation): the
        # next due snapshot is folded from the stored one, read first.
        a.forget_local()
        for i in range(100, 170):
            await both(chunk(task, f"{i} ", append=True))
        await a.batcher.flush()
        want = msgspec.json.encode((await reference.get(task.id))[0])
        assert stored() == (171, 171, want) and full == 0
        assert msgspec.json.encode((await b.get(task.id))[0]) == want
        await both(status(task, TaskState.COMPLETED, "done"))  # the end: the full path
        assert full == 1
        want = msgspec.json.encode((await reference.get(task.id))[0])
        assert stored() == (172, 172, want)
        assert msgspec.json.encode((await b.get(task.id))[0]) == want


async def test_list_pages_carry_the_first_pages_total_and_forged_tokens_are_refused(
    pg_url: str, tmp_path: Path,
) -> None:
    from scoped_a2a.protocol.errors import InvalidParams
    from scoped_a2a.protocol.types import ListTasksRequest

    async with two(pg_url, tmp_path) as (a, b):
        made = [new_task() for _ in range(5)]
        for task in made:
            await a.create(task)
        first = await b.list_tasks(ListTasksRequest(page_size=2))
        assert first.total_size == 5 and len(first.tasks) == 2, first
        await a.create(new_task())  # after the first page: counted by the next listing only
        seen = [t.id for t in first.tasks]
        page = first
        while page.next_page_token:
            page = await b.list_tasks(ListTasksRequest(page_size=2,
                                                       page_token=page.next_page_token))
            assert page.total_size == 5, (page.total_size, page.next_page_token)
            seen += [t.id for t in page.tasks]
        assert seen == [t.id for t in reversed(made)]  # newest first, each once
        assert (await b.list_tasks(ListTasksRequest(page_size=2))).total_size == 6
        for forged in ("x", "3.x", "3.9" * 10, "3.\u00b2", "3." + "9" * 5000):
            with pytest.raises(InvalidParams, match="pageToken"):
                await b.list_tasks(ListTasksRequest(page_size=2, page_token=forged))


async def test_an_end_written_here_answers_without_a_read_and_a_new_run_reads_locally(
    pg_url: str, tmp_path: Path,
) -> None:
    async with two(pg_url, tmp_path) as (a, b):
        task = new_task()
        await a.create(task)
        # a runs it and has appended nothing: its first read is local, and empty.
        page = await a.read(task.id, 0)
        assert page.entries == [] and page.next == 0 and not page.has_more
        await a.append(task.id, status(task, TaskState.WORKING, "w"))
        await a.append(task.id, status(task, TaskState.COMPLETED, "done"))
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT snap FROM scoped_a2a.tasks WHERE id = %s",
                               (task.id,)).fetchone()
        assert row is not None and a.ended_json(task.id) == bytes(row[0])
        assert b.ended_json(task.id) is None  # b did not write the end: it reads
        assert (await b.get(task.id))[0].status.state == TaskState.COMPLETED


async def test_streams_on_the_replica_running_them_read_nothing_from_the_database(
    pg_url: str, tmp_path: Path,
) -> None:
    # 8 runs append 100 chunks each (not waited for: batched) while a reader per task follows
    # as the SSE path does. This process's own notifications are not news: without that the
    # listener, hearing a batch's NOTIFY before its writer took the answer, sent readers to
    # the database (most streams of the benchmark did, each reading up to 100 events).
    async with two(pg_url, tmp_path) as (a, b):
        reads: list[str] = []
        run = a.pool.run

        async def counted(fn: Any, **kw: Any) -> Any:
            if kw.get("retry") and "read" in getattr(fn, "__qualname__", ""):
                reads.append(getattr(fn, "__qualname__", repr(fn)))
            return await run(fn, **kw)

        a.pool.run = counted  # type: ignore[method-assign]
        seen: dict[str, list[int]] = {}

        async def one() -> None:
            task = new_task()
            await a.create(task)
            seen[task.id] = []

            async def follow() -> None:
                after = 0
                while True:
                    page = await a.read(task.id, after)
                    seen[task.id] += [e.position for e in page.entries]
                    after = page.next
                    if page.task.status.state.terminal and not page.has_more:
                        return
                    if not page.entries:
                        await a.wait(task.id, after)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await a.append(task.id, status(task, TaskState.WORKING, "w"))
                for i in range(100):
                    await a.append(task.id, chunk(task, f"{i} ", append=i > 0))
                await a.append(task.id, status(task, TaskState.COMPLETED, "done"))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(one)
        assert all(p == list(range(1, 103)) for p in seen.values()), seen
        assert reads == [], f"{len(reads)} reads went to the database: {reads[:5]}"
        # The other replica hears every commit and reads the database.
        for task_id in seen:
            page = await b.read(task_id, 0, max_events=1000)
            assert [e.position for e in page.entries] == list(range(1, 103))


async def test_the_notification_of_an_end_rides_on_the_next_batch(
    pg_url: str, tmp_path: Path,
) -> None:
    # A synchronous commit's notification (a task's end) must not be in that commit: it is
    # queued to the batch writer, which sends it with the next batch's statement when there
    # is one (a statement of its own only when nothing else is queued).
    async with two(pg_url, tmp_path, poll_interval=3600) as (a, b):
        ended, running = new_task(), new_task()
        await a.create(ended)
        await a.create(running)
        alone = 0
        send_alone = a.batcher._notify

        async def counted(notes: list[str]) -> None:
            nonlocal alone
            alone += 1
            await send_alone(notes)

        a.batcher._notify = counted  # type: ignore[method-assign]
        woken = anyio.Event()

        async def waiter(after: int) -> None:
            await b.wait(ended.id, after)  # an hour's poll: only a notification ends this
            woken.set()

        with anyio.fail_after(30):  # a hang guard, not a timing assertion
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter, 0)
                await anyio.sleep(0.05)
                assert not woken.is_set()
                # Queued together, no checkpoint between: the writer takes both at once.
                a.batcher.notify(f"1 {ended.id}")
                await a.append(running.id, chunk(running, "x", append=False))
                await woken.wait()
        await a.batcher.flush()
        assert alone == 0, "the notification took a statement of its own"
        # With nothing else queued it goes alone, and still arrives.
        woken = anyio.Event()
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter, 1)
                await anyio.sleep(0.05)
                assert not woken.is_set()
                a.batcher.notify(f"2 {ended.id}")
                await woken.wait()
        assert alone == 1
