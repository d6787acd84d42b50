"""The PostgreSQL store under the faults of a real deployment, in process, both backends.

A connection cut in the middle of a transaction (a relay on loopback that cuts it at a chosen
``COMMIT``: cutter.py): before the commit is sent, the caller gets a retryable error at once,
nothing is stored and the next call works; after it was sent (committed, the answer lost), the
error says the request may have taken effect, the change is stored once, and a detached send
that failed so is not run twice by its resend. Found: the failed send released its message
claim although its task was stored, so the resend made a second task and both ran. A blocking
send's task stored so (its run never started) is recorded ``canceled``, reason
``not-started``, by the store once the database answers; it stayed ``submitted`` until its
process ended, before.

A failover to a read-only server: a real standby made with ``pg_basebackup``, the primary
stopped, the store on a URL naming both hosts; reads work, writes say the server is read-only,
and once the standby is promoted writes work, the listener is back and what the primary had
committed is there. A full disk: the database in a tablespace on a small tmpfs the test
mounts; writes say the disk is full at once, one log line, nothing committed is lost, and
writes work once space is freed. A full disk under the WAL (``initdb --waldir`` on a small
tmpfs, a replication slot holding every segment): the server PANICs and waits in recovery;
callers get the full-disk line, then "cannot be reached", one log line per class, nothing
acknowledged is lost, and the store writes again by itself once space returns. Tests that need
a mount or a standby say why they skip.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import psycopg
import pytest

from scoped_a2a.protocol.errors import ServerUnavailable, TaskNotFound
from scoped_a2a.protocol.trajectory import TrajectoryEvent
from scoped_a2a.protocol.types import Message, Part, Role, TaskPushNotificationConfig, TaskState
from scoped_a2a.store.postgres import PostgresTaskStore, open_postgres_store, unstarted
from scoped_a2a.store.postgres.connection import OutcomeUnknown

from ..helpers import rpc, text_message
from ..redis.conftest import Proc
from ..redis.test_redis_store import new_task, status, tick
from ..test_store_sqlite_full import fill, small_disk
from .cutter import Cutter
from .server import PostgresServer, shared_server, skip_without_postgres
from .test_postgres_serve import _logs

pytestmark = pytest.mark.anyio


async def test_a_connection_cut_mid_transaction_is_a_clear_error_and_nothing_runs_twice(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = shared_server()
    async with anyio.create_task_group() as tg:
        cutter = Cutter(server.port)
        port = await tg.start(cutter.serve)
        url = pg_url.replace(f":{server.port}/", f":{port}/")
        async with open_postgres_store(url, key_file=tmp_path / "k") as store:
            task = new_task()
            await store.create(task)

            def as_a_replica() -> None:
                # The process that runs a task appends its running events in one statement
                # or a batch, no transaction; a task's end written by a replica that holds no
                # snapshot of it takes the locked transaction: forget what this one holds.
                store._cache.pop(task.id, None)
                store.batcher.forget(task.id)

            end = status(task, TaskState.COMPLETED, "done")
            # Cut with the transaction open (its first statement ran): rolled back, said
            # at once; the next call works on a fresh connection.
            as_a_replica()
            cutter.arm(b"INSERT INTO events", "during")
            with pytest.raises(ServerUnavailable, match="cannot be reached"):
                await store.append(task.id, end)
            assert (await store.get(task.id))[1] == 0  # nothing half-written
            # Cut at its COMMIT, which the server never got, or committed unheard: the client
            # cannot tell, and the error says the request may have taken effect.
            for when in ("before", "after"):
                as_a_replica()
                cutter.arm(b"INSERT INTO events", when)
                with pytest.raises(ServerUnavailable, match="may or may not have taken effect"):
                    await store.append(task.id, end)
            assert cutter.cuts == 3
            assert await anyio.to_thread.run_sync(_positions, pg_url) == [0, 1]  # once
            as_a_replica()
            got, last = await store.get(task.id)
            assert (got.status.state, last) == (TaskState.COMPLETED, 1)

            # A send whose acknowledgment was lost with its commit, on both sides of it,
            # detached (its task and queued run in one commit) and blocking (its task).
            monkeypatch.setattr(unstarted, "SETTLE_WINDOW", 1.0)  # not a minute
            for i, (when, detached) in enumerate(
                    [(w, d) for w in ("after", "before") for d in (True, False)]):
                await _send_cut_at_commit(store, cutter, when, detached, f"m{i}")
            assert cutter.cuts == 7
        tg.cancel_scope.cancel()


async def _send_cut_at_commit(store: PostgresTaskStore, cutter: Cutter, when: str,
                              detached: bool, message_id: str) -> None:
    """A send of ``message_id`` whose commit is cut ``when`` (cutter.py); it fails, saying
    it may have taken effect, and releases its claim as the server does (server/resend.py).

    Committed (``after``): a detached send keeps its claim, so the resend finds that task,
    queued once; a blocking one's claim goes (the resend runs the message as a new task) and
    its stored task, never run, is recorded ``canceled``, reason ``not-started``, by the store
    itself (unstarted.py), not left ``submitted`` until the process ends. Not committed
    (``before``): nothing is stored, the resend runs the message, and the lost create is
    forgotten once the settle window has passed."""
    sent = new_task()
    msg = Message(message_id=message_id, role=Role.USER, parts=[Part(text="go")])
    assert await store.claim_message("alice", message_id, b"fp", sent.id) is None
    before = await store.queue.read_new("w", 10, 10)
    cutter.arm(b"INSERT INTO runs" if detached else b"INSERT INTO tasks", when)
    with pytest.raises(ServerUnavailable, match="may or may not") as failed:
        if detached:
            await store.queue.submit(sent, msg, request_metadata=None,
                                     detach_reason="test", owner="alice")
        else:
            await store.create(sent, owner="alice")
    assert isinstance(failed.value, OutcomeUnknown)
    # Remembered at once (a detached send's task is the queue's: its run is queued with it).
    assert (sent.id in store.unstarted.pending) is not detached
    await store.release_message("alice", message_id, sent.id)
    prior = await store.claim_message("alice", message_id, b"fp", "resent-" + message_id)
    jobs = [j.task_id for j in await store.queue.read_new("w", 10, 10)]
    assert before == []
    if when == "after" and detached:
        assert prior is not None and (prior.task_id, prior.created) == (sent.id, True)
        assert jobs == [sent.id]  # queued once, run once
        return
    assert jobs == [], (when, detached)
    if prior is not None:
        # The sweeper recorded the stored task ``not-started`` before the release ran, and an
        # ended task keeps its claim (claims.release); the server's resend then sees a rerun
        # reason and moves the claim to its new task (server/resend.py), as here: the resend
        # runs it. (Which of the two comes first is a race: 1 run in 5 under load.)
        assert when == "after" and prior.task_id == sent.id, (when, detached, prior)
        task, _ = await store.get(sent.id)
        assert task.status.message is not None and task.status.message.metadata == {
            "reason": "not-started"}, task.status
        resent = "resent-" + message_id
        assert await store.reclaim_message("alice", message_id, sent.id, resent) is None
    if when == "after":
        with anyio.fail_after(10):
            while (await store.get(sent.id))[0].status.state is TaskState.SUBMITTED:
                await anyio.sleep(0.05)
        task, _ = await store.get(sent.id)
        assert task.status.state is TaskState.CANCELED, task.status
        assert task.status.message is not None and task.status.message.metadata == {
            "reason": "not-started"}, task.status.message
        assert not await store.leases.covers(sent.id)  # nothing for the lease rule left
    else:
        with anyio.fail_after(10):  # looked for within the window, then forgotten
            while sent.id in store.unstarted.pending:
                await anyio.sleep(0.05)
        with pytest.raises(TaskNotFound):
            await store.get(sent.id)


@pytest.mark.one_python  # conftest: 3.11 only (a real serve process)
async def test_sends_whose_commit_was_cut_are_resent_safely_through_a_real_server(
    pg_url: str, serve: Callable[..., Proc],
) -> None:
    server = shared_server()
    async with anyio.create_task_group() as tg:
        cutter = Cutter(server.port)
        port = await tg.start(cutter.serve)
        proc = serve(pg_url.replace(f":{server.port}/", f":{port}/"))
        url = await proc.url()
        async with httpx.AsyncClient(timeout=30) as client:
            # A blocking send: its task committed, the answer lost. No run started, so
            # its resend runs the message (as a new task).
            msg = text_message("hi")
            cutter.arm(b"INSERT INTO tasks", "after")
            first = await rpc(client, url, "SendMessage", {"message": msg})
            assert first["error"]["code"] == -32000, first
            assert "may or may not have taken effect" in first["error"]["message"]
            with anyio.fail_after(30):
                again = await rpc(client, url, "SendMessage", {"message": msg})
            assert again["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", again
            # The task its first send stored never ran; the server records it canceled (it
            # stayed submitted until the process ended, before).
            blocking = msg["messageId"]
            tasks = await anyio.to_thread.run_sync(_tasks_of, pg_url, blocking)
            [orphan] = set(tasks) - {again["result"]["task"]["id"]}
            with anyio.fail_after(30):
                while (got := (await rpc(client, url, "GetTask", {"id": orphan}))["result"])[
                        "status"]["state"] == "TASK_STATE_SUBMITTED":
                    await anyio.sleep(0.1)
            assert got["status"]["state"] == "TASK_STATE_CANCELED", got
            assert got["status"]["message"]["metadata"] == {"reason": "not-started"}, got
            # A detached send: its task and queued run committed, the answer lost. Its
            # resend is that task, and the run executes once.
            msg = text_message("sleep 0.2")
            params = {"message": msg, "configuration": {"returnImmediately": True}}
            cutter.arm(b"INSERT INTO runs", "after")
            first = await rpc(client, url, "SendMessage", params)
            assert first["error"]["code"] == -32000, first
            task_id = (await rpc(client, url, "SendMessage", params))["result"]["task"]["id"]
            with anyio.fail_after(30):
                while (await rpc(client, url, "GetTask", {"id": task_id}))["result"][
                        "status"]["state"] != "TASK_STATE_COMPLETED":
                    await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    assert cutter.cuts == 2
    tasks = await anyio.to_thread.run_sync(_tasks_of, pg_url, msg["messageId"])
    assert tasks == [task_id]  # one task holds the detached message...
    logs = await anyio.to_thread.run_sync(_logs, pg_url)
    starts = [e for e in logs[task_id] if e.get("data", {}).get("type") == "start"]
    assert len(starts) == 1, logs[task_id]  # ... and its run started once
    assert not [e for e in logs[orphan] if e.get("data", {}).get("type") == "start"], \
        logs[orphan]  # the blocking message ran once: in its resend's task


def _tasks_of(url: str, message_id: str) -> list[str]:
    """The tasks whose history holds the message ``message_id``."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT id FROM scoped_a2a.tasks WHERE position(%s in "
                            "convert_from(snap, 'UTF8')) > 0", (message_id,)).fetchall()
    return [str(r[0]) for r in rows]


@pytest.mark.one_python("3.13")  # conftest: 3.13 only (two postmasters and a base backup)
async def test_a_failover_to_a_standby_is_read_only_until_promoted_and_heals(
    own_postgres: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    primary = own_postgres
    key = tmp_path / "k"
    before = new_task()
    async with open_postgres_store(primary.url(), key_file=key) as store:
        await store.create(before)
        await store.append(before.id, status(before, TaskState.COMPLETED, "before"))
    try:
        standby = await anyio.to_thread.run_sync(primary.standby)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot make a standby with pg_basebackup here: {exc}")
    try:
        # One URL naming both servers: libpq tries them in turn, as a client of a failover
        # pair is configured (or a DNS name moved to the standby).
        both = (primary.url().replace(f"127.0.0.1:{primary.port}",
                                      f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"))
        async with open_postgres_store(both, key_file=key) as store, \
                open_postgres_store(primary.url(), key_file=key) as other:
            task = new_task()
            await other.create(task)  # streamed to the standby (committed synchronously)
            await anyio.to_thread.run_sync(primary.stop)  # the primary is gone
            # Its pooled connection was to the primary (unless the lease's heartbeat found
            # it dead first: then this call reached the standby).
            with pytest.raises(ServerUnavailable, match=r"cannot be reached|read-only"):
                await store.create(new_task())
            # Now on the standby: reads work, writes say the server is read-only.
            with anyio.fail_after(30):
                while True:
                    try:
                        await store.get(task.id)
                        break
                    except ServerUnavailable:  # the standby has not replayed it yet
                        await anyio.sleep(0.1)
            assert (await store.get(before.id))[0].status.state == TaskState.COMPLETED
            for _ in range(3):  # reads and writes interleaved, as callers would
                with pytest.raises(ServerUnavailable, match="is read-only"):
                    await store.append(task.id, tick(task, 0))
                assert (await store.get(task.id))[1] == 0
            lines = [r.getMessage() for r in caplog.records if "read-only" in r.getMessage()]
            assert len(lines) == 1, lines  # one log line for the failure class
            with anyio.fail_after(30):  # no LISTEN on a standby
                while store.waiters.listening:
                    await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(standby.promote)
            # Promoted: the same process writes again, by itself.
            assert await store.append(task.id, tick(task, 0)) == 1
            with anyio.fail_after(30):  # and listens again (backoff at most 2 s)
                while not store.waiters.listening:
                    await anyio.sleep(0.05)
            async with open_postgres_store(standby.url(), key_file=key) as promoted, \
                    anyio.create_task_group() as tg:
                tg.start_soon(promoted.append, task.id, tick(task, 1))
                with anyio.fail_after(30):  # woken by the new primary's NOTIFY
                    await store.wait(task.id, 1)
            assert (await store.get(task.id))[1] == 2
    finally:
        standby.destroy()


def _positions(url: str) -> list[int]:
    """Every event position of the schema's (one) task, and 0 for the task itself."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT 0 UNION ALL SELECT pos FROM scoped_a2a.events "
                            "ORDER BY 1").fetchall()
    return [int(r[0]) for r in rows]


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_a_full_disk_is_a_clear_error_at_once_and_heals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    server = shared_server()
    name = "full_" + uuid.uuid4().hex[:12]
    # Under the server's directory, where the postgres user may go (tmp_path is 0700).
    with small_disk(server.directory / name, "24m") as small:
        space = small / "pg"
        space.mkdir()
        shutil.chown(space, "postgres", "postgres")
        try:
            server.psql(f"CREATE TABLESPACE {name} LOCATION '{space}'")
            server.psql(f"CREATE DATABASE {name} OWNER a2a TABLESPACE {name}")
            await _fill_while_writing(server.url(name), small, tmp_path, caplog)
        finally:
            server.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            server.psql(f"DROP TABLESPACE IF EXISTS {name}")


async def _fill_while_writing(url: str, small: Path, tmp_path: Path,
                              caplog: pytest.LogCaptureFixture) -> None:
    # sync_events: each append waits for its commit, so each is answered (a run's running
    # events are otherwise not waited for, and a failure is told at the next append). A short
    # lease: its heartbeat (a small upsert, which may fit where an event does not) runs every
    # 0.2 s between the writes; it ended the logged failure, and each next write logged it
    # again (the test failed so under load, when a 3.3 s heartbeat came in between).
    async with open_postgres_store(url, key_file=tmp_path / "k", sync_events=True,
                                   lease=0.6) as store:
        kept = new_task()
        await store.create(kept)
        await store.append(kept.id, status(kept, TaskState.COMPLETED, "kept"))
        task = new_task()
        await store.create(task)
        filler = await anyio.to_thread.run_sync(fill, small)
        caplog.clear()
        failures = 0
        big = os.urandom(100_000).hex()  # each event needs new pages (TOAST compresses, but
        # not random digits much)
        with anyio.fail_after(60):  # a hang guard: each call is answered at once
            for i in range(20):
                try:
                    await store.append(task.id, TrajectoryEvent(
                        task_id=task.id, context_id=task.context_id, data={"i": i, "pad": big}))
                except ServerUnavailable as exc:
                    assert "full disk" in str(exc) and "pg_tblspc" not in str(exc), exc
                    failures += 1
                await store.get(kept.id)  # reads go on, and do not end the failure
        assert failures >= 15, failures  # pages freed inside the files may take a few
        lines = [r.getMessage() for r in caplog.records if "full disk" in r.getMessage()]
        assert len(lines) == 1, lines  # one log line for the failure class
        snap, _ = await store.get(kept.id)  # what was committed is there
        assert snap.status.state == TaskState.COMPLETED
        filler.unlink()
        last = await store.append(task.id, status(task, TaskState.COMPLETED, "done"))
        assert last == 21 - failures
        assert (await store.get(task.id))[0].status.state == TaskState.COMPLETED
        assert any("answers again" in r.getMessage() for r in caplog.records)


async def test_an_adoption_whose_reply_was_lost_is_watched_at_the_next(
    pg_url: str, tmp_path: Path,
) -> None:
    """A push watch adoption (store/postgres/push_watches.py) committed unheard: the next
    adoption returns that watch again (this process owns it, unwatched), and only then."""
    server = shared_server()
    async with anyio.create_task_group() as tg:
        cutter = Cutter(server.port)
        port = await tg.start(cutter.serve)
        url = pg_url.replace(f":{server.port}/", f":{port}/")
        key = tmp_path / "k"
        async with open_postgres_store(pg_url, key_file=key) as a, \
                open_postgres_store(url, key_file=key) as b:
            task = new_task()
            await a.create(task)
            await a.set_push_config(task.id, TaskPushNotificationConfig(
                url="https://hooks.example/a2a", id="c1", task_id=task.id))
            working = (3, TaskState.WORKING.value, True)
            assert await a.watches.own(task.id, "c1", working) == working
            await a.watches.release([(task.id, "c1")])  # A shut down: the watch is free
            cutter.arm(b"WITH free AS", "after")
            with pytest.raises(ServerUnavailable, match="may or may not"):
                await b.watches.adopt(10)
            assert cutter.cuts == 1
            assert await a.watches.adopt(10) == []  # B owns it (committed), alive
            expected = [(task.id, "c1", *working)]
            assert await b.watches.adopt(10) == expected  # re-adopted: B watches it now
            assert await b.watches.adopt(10) == []  # answered: nothing more to re-read
        tg.cancel_scope.cancel()


@pytest.mark.one_python("3.13")  # conftest: 3.13 only (a postmaster of its own)
async def test_a_full_wal_disk_is_a_clear_error_loses_nothing_acknowledged_and_heals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    skip_without_postgres()
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="scoped-a2a-pg-wal-")))
    try:
        server._prepare()
        with small_disk(server.directory / "wal-disk", "12m") as small:
            try:
                # 1 MB WAL segments, so a small file system holds several; a replication
                # slot holding every segment from the start, so the checkpointer recycles
                # none and the writes below fill the disk (as a standby that fell behind does).
                await anyio.to_thread.run_sync(lambda: server.init(
                    f"--waldir={small / 'wal'}", "--wal-segsize=1"))
                server.psql("SELECT pg_create_physical_replication_slot('hold', true)")
                await _fill_the_wal(server, small, caplog)
            finally:
                server.stop()  # before its disk goes
    finally:
        server.destroy()


async def _fill_the_wal(server: PostgresServer, small: Path,
                        caplog: pytest.LogCaptureFixture) -> None:
    async with open_postgres_store(server.url(), key_file=server.directory / "k",
                                   sync_events=True) as store:
        kept = new_task()
        await store.create(kept)
        await store.append(kept.id, status(kept, TaskState.COMPLETED, "kept"))
        task = new_task()
        await store.create(task)
        filler = await anyio.to_thread.run_sync(fill, small)
        caplog.clear()
        acknowledged: dict[int, int] = {}  # position -> the event's i
        errors: list[str] = []
        restarted = 0
        big = os.urandom(50_000).hex()
        with anyio.fail_after(120):  # a hang guard: each call is answered
            i = 0
            while len(errors) < 10:  # the WAL is full, the server PANICs: calls fail
                i += 1
                try:
                    acknowledged[await store.append(task.id, TrajectoryEvent(
                        task_id=task.id, context_id=task.context_id,
                        data={"i": i, "pad": big}))] = i
                except ServerUnavailable as exc:
                    errors.append(str(exc))
                    await anyio.sleep(0.2)
                assert i < 500, "the WAL never filled"
            failing = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            await anyio.to_thread.run_sync(filler.unlink)  # space returns
            freed = anyio.current_time()
            while True:  # the store recovers by itself once the server does
                if server.proc is not None and server.proc.poll() is not None:
                    # The postmaster exited (its end-of-recovery checkpoint could not be
                    # written while the disk was full): started again, as its supervisor would.
                    restarted += 1
                    await anyio.to_thread.run_sync(server.restart)
                try:
                    pos = await store.append(task.id, status(task, TaskState.COMPLETED, "done"))
                    break
                except ServerUnavailable as exc:
                    errors.append(str(exc))
                    await anyio.sleep(0.2)
        print(f"WAL full: {len(acknowledged)} acknowledged, {len(errors)} failed, healed "
              f"{anyio.current_time() - freed:.1f} s after space returned, postmaster "
              f"restarted {restarted} time(s); errors: {sorted(set(errors))}; "
              f"log: {failing}")
        for text in errors:  # clear, and no file of the server named
            assert ("has a full disk" in text or "cannot be reached" in text), text
            assert "pg_wal" not in text and "No space left" not in text, text
        assert any("has a full disk" in text for text in errors), errors
        # One log line per failure class while it lasted (the class: what the line says
        # before the server's own words).
        classes = [line.split(": ", 1)[0] for line in failing]
        assert len(classes) == len(set(classes)), failing
        assert any("answers again" in r.getMessage() for r in caplog.records)
        # Nothing acknowledged is lost; the end is written after every acknowledged event.
        stored = await anyio.to_thread.run_sync(_events_of, server.url(), task.id)
        assert {p: stored.get(p) for p in acknowledged} == acknowledged
        assert pos == max(stored) and max(stored) > max(acknowledged, default=0)
        assert (await store.get(kept.id))[0].status.state == TaskState.COMPLETED
        assert (await store.get(task.id))[0].status.state == TaskState.COMPLETED


def _events_of(url: str, task_id: str) -> dict[int, int | None]:
    """Position -> ``data.i`` of each stored event of ``task_id`` (None: not a numbered one)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT e.pos, e.body FROM scoped_a2a.events e JOIN "
                            "scoped_a2a.tasks t ON t.seq = e.task WHERE t.id = %s",
                            (task_id,)).fetchall()
    return {int(p): json.loads(bytes(b)).get("data", {}).get("i") for p, b in rows}
