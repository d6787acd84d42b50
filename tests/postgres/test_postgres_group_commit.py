"""Group commit (store/postgres/group_commit.py): concurrent creates with their claims, and
concurrent ends, share statements; each caller gets its own outcome. On a real PostgreSQL,
both backends, through the real store (and, for blocking sends, through hypercorn).

To hold a statement under way, a second connection (``Holder``) inserts a claim key in a
transaction it leaves open: a create of that key waits for it (``ON CONFLICT``), and with one
statement in flight at a time (the default) every later create queues behind it, until the
statement has stalled for ``stalled`` seconds (set to an hour where the test needs the queue).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.protocol.errors import InvalidParams, TaskNotFound
from scoped_a2a.protocol.types import Task, TaskState
from scoped_a2a.store.claims import AlreadyClaimed, NewClaim, claim_key
from scoped_a2a.store.liveness import UNSTARTED_REASON
from scoped_a2a.store.postgres import PostgresTaskStore, open_postgres_store, unstarted
from scoped_a2a.store.postgres.connection import OutcomeUnknown

from ..helpers import rpc, served, text_message
from ..redis.test_redis_store import new_task, status
from ..test_exactly_once import Counting, send_params
from .cutter import Cutter
from .server import shared_server

pytestmark = pytest.mark.anyio


class Holder:
    """A transaction of another connection holding claim keys until :meth:`release`, or the
    end of its ``async with`` (entered inside the task group of the creates it holds, so a
    failing test releases them and ends instead of hanging)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.Connection[Any] | None = None

    async def __aenter__(self) -> Holder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            await self.release()

    async def hold(self, owner: str, *message_ids: str) -> None:
        def run() -> None:
            self.conn = psycopg.connect(self.url)
            for m in message_ids:
                self.conn.execute("INSERT INTO scoped_a2a.claims VALUES (%s, 'fp', 'h', 0, "
                                  "NULL, NULL)", (claim_key(owner, m),))
        await anyio.to_thread.run_sync(run)

    async def release(self) -> None:
        conn, self.conn = self.conn, None
        assert conn is not None
        await anyio.to_thread.run_sync(conn.rollback)
        await anyio.to_thread.run_sync(conn.close)


async def until(check: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(10):
        while not check():
            await anyio.sleep(0.005)
    assert check(), what


def rows(url: str, query: str, *args: Any) -> list[Any]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, args).fetchall()


async def create(store: PostgresTaskStore, task: Task, message_id: str,
                 out: dict[str, Any], owner: str = "alice") -> None:
    """create_claimed, its outcome in ``out[task.id]``: True, or the exception's class."""
    try:
        await store.create_claimed(task, NewClaim(message_id, b"fp"), owner=owner)
        out[task.id] = True
    except (AlreadyClaimed, InvalidParams, OutcomeUnknown) as exc:
        out[task.id] = type(exc)


async def test_concurrent_creates_share_statements_and_each_gets_its_own_outcome(
    pg_url: str, tmp_path: Path,
) -> None:
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store:
        held = new_task()
        await store.create_claimed(held, NewClaim("taken", b"fp"), owner="alice")
        base = store.creates.statements
        fresh = [new_task() for _ in range(40)]
        twins = [new_task() for _ in range(6)]  # one messageId: one may win
        late = [new_task() for _ in range(3)]  # the messageId claimed before
        out: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            for i, t in enumerate(fresh):
                tg.start_soon(create, store, t, f"m{i}", out)
            for t in twins:
                tg.start_soon(create, store, t, "twin", out)
            for t in late:
                tg.start_soon(create, store, t, "taken", out)
        ran = store.creates.statements - base
        assert ran < len(fresh) + len(twins) + len(late), ran
        assert store.creates.written > store.creates.statements  # some held several
        assert all(out[t.id] is True for t in fresh), out
        assert sorted(out[t.id] is True for t in twins) == [False] * 5 + [True], out
        assert {out[t.id] for t in twins if out[t.id] is not True} == {AlreadyClaimed}
        assert all(out[t.id] is AlreadyClaimed for t in late), out
        # Each stored task is the caller's, claimed by its own messageId; nothing else stored.
        stored = {r[0] for r in rows(pg_url, "SELECT id FROM scoped_a2a.tasks")}
        winner = next(t.id for t in twins if out[t.id] is True)
        assert stored == {held.id, winner, *(t.id for t in fresh)}
        claims = dict(rows(pg_url, "SELECT key, task_id FROM scoped_a2a.claims"))
        for i, t in enumerate(fresh):
            assert claims[claim_key("alice", f"m{i}")] == t.id
        assert claims[claim_key("alice", "twin")] == winner
        for t in fresh[:3]:  # this process runs them: tracked from position 0
            assert store.batcher.last_here(t.id) == 0
            assert (await store.get(t.id))[0].status.state is TaskState.SUBMITTED


async def test_concurrent_ends_share_statements_and_a_moved_task_takes_the_transaction(
    pg_url: str, tmp_path: Path,
) -> None:
    key = tmp_path / "k"
    async with open_postgres_store(pg_url, key_file=key) as a, \
            open_postgres_store(pg_url, key_file=key) as b:
        tasks = [new_task() for _ in range(30)]
        for t in tasks:
            await a.create(t)
            await a.append(t.id, status(t, TaskState.WORKING, "on it"))
        await a.batcher.flush()
        moved = tasks[7]  # another replica writes it: the end here must not go by position
        assert await b.append(moved.id, status(moved, TaskState.WORKING, "elsewhere")) == 2
        base = a.ends.statements
        got: dict[str, int] = {}

        async def end(t: Task) -> None:
            got[t.id] = await a.append(t.id, status(t, TaskState.COMPLETED, "done"))

        async with anyio.create_task_group() as tg:
            for t in tasks:
                tg.start_soon(end, t)
        assert a.ends.statements - base < len(tasks), a.ends.statements - base
        assert a.ends.written > a.ends.statements
        assert got == {t.id: 3 if t is moved else 2 for t in tasks}
        for t in tasks:
            task, last = await b.get(t.id)
            assert (task.status.state, last) == (TaskState.COMPLETED, got[t.id])
            assert a.ended_json(t.id) is not None
        positions = rows(pg_url, "SELECT t.id, array_agg(e.pos ORDER BY e.pos) FROM "
                         "scoped_a2a.tasks t JOIN scoped_a2a.events e ON e.task = t.seq "
                         "GROUP BY t.id")
        assert {i: p for i, p in positions} == {
            t.id: [1, 2, 3] if t is moved else [1, 2] for t in tasks}
        # No process named any more (the lease rule), an end time each.
        left = rows(pg_url, "SELECT count(*) FROM scoped_a2a.tasks WHERE process IS NOT NULL "
                    "OR ended_at IS NULL")
        assert left == [(0,)]


async def _queued_behind_a_held_create(
    store: PostgresTaskStore, holder: Holder, tg: Any, out: dict[str, Any],
    later: list[tuple[Task, str]],
) -> Task:
    """One statement at a time (and no other started however long it waits: ``stalled``);
    a create held by ``holder`` leads; ``later`` queue behind."""
    store.creates.in_flight, store.creates.stalled = 1, 3600
    first = new_task()
    await holder.hold("alice", "held")
    ran = store.creates.statements
    tg.start_soon(create, store, first, "held", out)
    # Its statement took it (once it had a connection: what queues before goes with it).
    await until(lambda: store.creates.statements == ran + 1, "the first create's statement")
    for task, message_id in later:
        tg.start_soon(create, store, task, message_id, out)
    await until(lambda: len(store.creates._queue) == len(later), "the others queue")
    return first


async def test_a_bad_item_is_written_alone_and_the_others_of_its_statement_are_stored(
    pg_url: str, tmp_path: Path,
) -> None:
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store, \
            anyio.create_task_group() as tg, Holder(pg_url) as holder:
        existing = new_task()
        await store.create_claimed(existing, NewClaim("first", b"fp"), owner="alice")
        dup = existing  # its task id again, another messageId
        good = [new_task() for _ in range(3)]
        out: dict[str, Any] = {}
        later = [(good[0], "g0"), (dup, "dup"), (good[1], "g1"), (good[2], "g2")]
        ran = store.creates.statements
        first = await _queued_behind_a_held_create(store, holder, tg, out, later)
        await holder.release()
        await until(lambda: len(out) == 5, "every create answered")
        assert out[first.id] is True
        assert all(out[t.id] is True for t in good), out
        assert out[existing.id] is InvalidParams  # the same task id again: its own error
        # The statement of four failed as a whole (after the first's); each was then
        # written alone, on the single path (not counted here).
        assert store.creates.statements - ran == 2
        assert {r[0] for r in rows(pg_url, "SELECT id FROM scoped_a2a.tasks")} == {
            existing.id, first.id, *(t.id for t in good)}
        # The duplicate's claim is not made: its messageId is free for a resend.
        assert not rows(pg_url, "SELECT 1 FROM scoped_a2a.claims WHERE key = %s",
                        claim_key("alice", "dup"))


async def test_a_create_cancelled_while_queued_stores_nothing_and_once_taken_returns(
    pg_url: str, tmp_path: Path,
) -> None:
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store, \
            anyio.create_task_group() as tg, Holder(pg_url) as holder, \
            Holder(pg_url) as holder2:
        out: dict[str, Any] = {}
        queued, taken, other = new_task(), new_task(), new_task()
        seen: dict[str, list[str]] = {}

        async def cancellable(task: Task, message_id: str, scope: anyio.CancelScope) -> None:
            steps = seen.setdefault(task.id, [])
            with scope:
                steps.append("sent")
                await store.create_claimed(task, NewClaim(message_id, b"fp"), owner="alice")
                steps.append("returned")  # the cancel is seen at the next checkpoint
                await anyio.sleep(0)
                steps.append("went on")

        # Queued, not taken: cancelled, it leaves the queue; nothing stored.
        store.creates.in_flight, store.creates.stalled = 1, 3600
        first = new_task()
        await holder.hold("alice", "held")
        tg.start_soon(create, store, first, "held", out)
        await until(lambda: store.creates.statements == 1, "the first create's statement")
        scope = anyio.CancelScope()
        tg.start_soon(cancellable, queued, "q", scope)
        await until(lambda: len(store.creates._queue) == 1, "queued")
        scope.cancel()
        await until(lambda: not store.creates._queue, "left the queue")
        assert seen[queued.id] == ["sent"]

        # Taken by a statement that waits (its other item's key is held): cancelled, it
        # returns once the statement committed, stored and tracked, then sees the cancel.
        await holder2.hold("alice", "o")
        scope2 = anyio.CancelScope()
        tg.start_soon(create, store, other, "o", out)
        await until(lambda: len(store.creates._queue) == 1, "other queued")
        tg.start_soon(cancellable, taken, "t", scope2)
        await until(lambda: len(store.creates._queue) == 2, "taken queued")
        await holder.release()  # the first commits; the next statement takes both
        await until(lambda: out.get(first.id) is True and not store.creates._queue,
                    "both taken")
        scope2.cancel()
        await anyio.sleep(0.05)
        assert seen[taken.id] == ["sent"]  # still waiting for its statement
        await holder2.release()
        await until(lambda: out.get(other.id) is True, "other stored")
        await until(lambda: len(seen[taken.id]) == 2, "taken answered")
        assert seen[taken.id] == ["sent", "returned"]
        assert store.batcher.last_here(taken.id) == 0  # its bookkeeping ran
        with pytest.raises(TaskNotFound):
            await store.get(queued.id)
        assert (await store.get(taken.id))[0].status.state is TaskState.SUBMITTED
        assert not rows(pg_url, "SELECT 1 FROM scoped_a2a.claims WHERE key = %s",
                        claim_key("alice", "q"))
        assert store.creates._running == 0
        tg.cancel_scope.cancel()


async def test_a_create_waiting_for_a_lock_held_elsewhere_does_not_hold_the_others(
    pg_url: str, tmp_path: Path,
) -> None:
    # Another transaction (a replica's, frozen) holds a claim key: the create of that key
    # waits for it; the creates after it go on in statements of their own once it stalled.
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store, \
            anyio.create_task_group() as tg, Holder(pg_url) as holder:
        store.creates.stalled = 0.05
        await holder.hold("alice", "held")
        out: dict[str, Any] = {}
        stuck = new_task()
        tg.start_soon(create, store, stuck, "held", out)
        await until(lambda: store.creates.statements == 1, "the held create's statement")
        others = [new_task() for _ in range(5)]
        for i, t in enumerate(others):
            tg.start_soon(create, store, t, f"o{i}", out)
        await until(lambda: len(out) == len(others), "the others answered")
        assert stuck.id not in out and all(out[t.id] is True for t in others), out
        await holder.release()
        await until(lambda: stuck.id in out, "the held one answered")
        assert out[stuck.id] is True
        assert store.creates._running == 0


@pytest.mark.parametrize("when", ["after", "before"])
async def test_a_statement_cut_at_its_commit_tells_every_caller_and_settles_every_task(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str,
) -> None:
    monkeypatch.setattr(unstarted, "SETTLE_WINDOW", 2.0)
    server = shared_server()
    async with anyio.create_task_group() as relay:
        cutter = Cutter(server.port)
        port = await relay.start(cutter.serve)
        url = pg_url.replace(f":{server.port}/", f":{port}/")
        async with open_postgres_store(url, key_file=tmp_path / "k") as store, \
                anyio.create_task_group() as tg, Holder(pg_url) as holder:
            cut = [new_task() for _ in range(3)]
            out: dict[str, Any] = {}
            cutter.arm(b"x(id text, owner text", when)  # the multi-row create only
            first = await _queued_behind_a_held_create(
                store, holder, tg, out, [(t, f"c{i}") for i, t in enumerate(cut)])
            await holder.release()
            await until(lambda: len(out) == 4, "every create answered")
            assert cutter.cuts == 1
            assert out[first.id] is True
            assert [out[t.id] for t in cut] == [OutcomeUnknown] * 3
            stored = {r[0] for r in rows(pg_url, "SELECT id FROM scoped_a2a.tasks")}
            assert ({t.id for t in cut} <= stored) is (when == "after")
            assert not {t.id for t in cut} & stored or when == "after"
            # Every task of the statement is settled (unstarted.py, in the background):
            # each stored one recorded canceled, not-started; the others forgotten.
            with anyio.fail_after(10):
                while {t.id for t in cut} & set(store.unstarted.pending):
                    await anyio.sleep(0.05)
            for t in cut:
                if when == "after":
                    task, _ = await store.get(t.id)
                    assert task.status.state is TaskState.CANCELED, task.status
                    assert task.status.message is not None
                    assert task.status.message.metadata == {"reason": UNSTARTED_REASON}
                else:
                    with pytest.raises(TaskNotFound):
                        await store.get(t.id)
            # The next statements work, on fresh connections.
            again: dict[str, Any] = {}
            await create(store, new_task(), "after the cut", again)
            assert list(again.values()) == [True]
        relay.cancel_scope.cancel()


async def test_blocking_sends_through_hypercorn_share_creates_and_ends(
    pg_url: str, tmp_path: Path,
) -> None:
    agent = Counting()
    async with open_postgres_store(pg_url, key_file=tmp_path / "k") as store, \
            anyio.create_task_group() as nursery:
        async with served(A2AApp(agent, store=store, detached=nursery)) as url, \
                httpx.AsyncClient(timeout=30) as client:
            answers: list[dict[str, Any]] = []

            async def send(i: int) -> None:
                msg = text_message(f"send {i}")
                answers.append(await rpc(client, url, "SendMessage", send_params(msg)))

            async with anyio.create_task_group() as tg:
                for i in range(32):
                    tg.start_soon(send, i)
        states = {a["result"]["task"]["status"]["state"] for a in answers}
        assert states == {"TASK_STATE_COMPLETED"}, answers[:2]
        assert len({a["result"]["task"]["id"] for a in answers}) == 32
        assert set(agent.starts.values()) == {1} and len(agent.starts) == 32
        assert store.creates.written == 32 and store.ends.written == 32
        assert store.creates.statements < 32 and store.ends.statements < 32, (
            store.creates.statements, store.ends.statements)
        nursery.cancel_scope.cancel()
