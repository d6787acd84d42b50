"""Batched and pushed appends on the Redis store (store/redis/batch.py, store/redis/writer.py).

Script calls that arrive together go to Redis as one batch; a run's events other than the end
of a turn are pushed (the run does not wait for their round trip) and shown to readers only
once stored. These tests pin what that must not change: positions and order, a refusal or an
outage reaches the run instead of vanishing, and nothing a reader was shown is lost.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import msgspec
import pytest

from scoped_a2a.protocol.errors import ServerUnavailable
from scoped_a2a.protocol.types import Task, TaskState
from scoped_a2a.runtime.tail import tail
from scoped_a2a.store.base import LogEntry, LogPage
from scoped_a2a.store.redis import open_redis_store, scripts
from scoped_a2a.store.redis import writer as writer_module
from scoped_a2a.store.redis.store import RedisTaskStore
from scoped_a2a.store.redis.writer import KIND_OF, YIELD_EVERY
from scoped_a2a.store.snapshot import apply_event

from .conftest import RedisServer
from .test_redis_local import chunk
from .test_redis_store import new_task, status

pytestmark = pytest.mark.anyio


def texts(page: LogPage) -> list[str]:
    out = []
    for entry in page.entries:
        artifact = getattr(entry.event, "artifact", None)
        if artifact is not None:
            out.append(artifact.parts[0].text)
    return out


async def read_all(store: RedisTaskStore, task_id: str) -> LogPage:
    page = await store.read(task_id, 0, max_events=10_000)
    assert not page.has_more
    return page


async def test_runs_appending_at_once_share_batches_and_keep_positions_and_order(
    redis_server: RedisServer,
) -> None:
    runs, chunks = 20, 30
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        tasks = [new_task() for _ in range(runs)]

        async def run(task: Task) -> None:
            await a.create(task)
            await a.append(task.id, status(task, TaskState.WORKING))
            for i in range(chunks):
                await a.append(task.id, chunk(task, f"{i} ", append=i > 0))
            await a.append(task.id, status(task, TaskState.COMPLETED))

        before = a.conn.batcher.batches
        async with anyio.create_task_group() as tg:
            for task in tasks:
                tg.start_soon(run, task)
        batches = a.conn.batcher.batches - before
        calls = runs * (chunks + 3)
        # Read through the other connection, which holds nothing: what Redis stored.
        for task in tasks:
            page = await read_all(b, task.id)
            assert [e.position for e in page.entries] == list(range(1, chunks + 3)), task.id
            assert texts(page) == [f"{i} " for i in range(chunks)]
            assert page.task.status.state is TaskState.COMPLETED
            assert page.task.artifacts is not None
            assert "".join(p.text or "" for p in page.task.artifacts[0].parts) == "".join(
                f"{i} " for i in range(chunks))
        # The runs did not wait for each chunk's round trip: many calls per batch.
        assert batches * 4 <= calls, f"{batches} batches for {calls} calls"


async def test_redis_killed_with_pushed_events_queued_tells_the_run_and_loses_nothing_shown(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url) as store:
        with anyio.fail_after(10):
            await store.conn.listening.wait()
        task = new_task()
        await store.create(task)
        shown: list[tuple[int, str]] = []
        ten_shown = anyio.Event()

        async def on_page(page: LogPage) -> None:
            for entry in page.entries:
                artifact = getattr(entry.event, "artifact", None)
                if artifact is not None:
                    shown.append((entry.position, artifact.parts[0].text))
            if len(shown) >= 10:
                ten_shown.set()

        async def reader() -> None:
            # Redis goes away below: a stream would end with this error too.
            with contextlib.suppress(ServerUnavailable):
                await tail(store, task.id, 0, on_page)

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await store.append(task.id, status(task, TaskState.WORKING))
            for i in range(10):
                await store.append(task.id, chunk(task, f"{i} ", append=i > 0))
            with anyio.fail_after(10):
                await ten_shown.wait()  # stored (a reader is shown an event only then)
            # Redis dies; the run pushes 200 more (their batches fail), then ends its turn.
            redis_server.kill()
            told: list[str] = []
            try:
                for i in range(10, 210):
                    await store.append(task.id, chunk(task, f"{i} "))
            except ServerUnavailable as exc:  # heard at a later event of the run
                told.append(str(exc))
            # The end of a turn waits for its batch: a clear, retryable error.
            with pytest.raises(ServerUnavailable) as waited:
                await store.append(task.id, status(task, TaskState.INPUT_REQUIRED))
            told.append(str(waited.value))
            if not any("were not stored" in t for t in told):
                # The run's next event hears that its pushed events were not stored.
                with pytest.raises(ServerUnavailable) as pushed:
                    await store.append(task.id, chunk(task, "after"))
                told.append(str(pushed.value))
            assert any("were not stored" in t for t in told), told
            assert all("try again" in t for t in told), told
            redis_server.start()  # from its append-only file
            # Its end is recorded on top of what Redis holds.
            with anyio.fail_after(20):
                while True:
                    try:
                        await store.append(task.id, status(task, TaskState.FAILED))
                        break
                    except ServerUnavailable:
                        await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
    async with open_redis_store(redis_server.url) as fresh:
        page = await read_all(fresh, task.id)
    positions = [e.position for e in page.entries]
    assert positions == list(range(1, len(positions) + 1))
    stored = {e.position: t for e, t in zip(
        [e for e in page.entries if getattr(e.event, "artifact", None) is not None],
        texts(page), strict=True)}
    # Nothing shown is lost; nothing after the kill was stored; the end follows what is.
    assert all(stored.get(pos) == text for pos, text in shown), (shown, stored)
    assert list(stored.values()) == [f"{i} " for i in range(10)]
    assert page.task.status.state is TaskState.FAILED
    assert page.task.artifacts is not None
    assert "".join(p.text or "" for p in page.task.artifacts[0].parts) == "".join(
        f"{i} " for i in range(10))


async def test_two_replicas_writing_one_task_log_keep_it_whole_and_hear_what_failed(
    redis_server: RedisServer,
) -> None:
    n = 60
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        task = new_task()
        await a.create(task)
        await a.append(task.id, status(task, TaskState.WORKING))
        told = {"a": 0, "b": 0}

        async def writer(name: str, store: RedisTaskStore) -> None:
            for i in range(n):
                try:
                    await store.append(task.id, chunk(task, f"{name}{i} "))
                except ServerUnavailable as exc:
                    assert "were not stored" in str(exc), exc
                    told[name] += 1
                await anyio.sleep(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, "a", a)
            tg.start_soon(writer, "b", b)
        # Each ends a turn (waited: by its return every earlier batch of that writer has come
        # back), twice: a push that failed meanwhile is heard at the second at the latest.
        for name, store in (("a", a), ("b", b)):
            for _ in range(2):
                try:
                    await store.append(task.id, status(task, TaskState.INPUT_REQUIRED))
                except ServerUnavailable as exc:
                    assert "were not stored" in str(exc), exc
                    told[name] += 1
        await b.append(task.id, status(task, TaskState.COMPLETED))
        page = await read_all(a, task.id)
    positions = [e.position for e in page.entries]
    assert positions == list(range(1, len(positions) + 1))
    got = texts(page)
    assert len(got) == len(set(got)), "an event was stored twice"
    for name in ("a", "b"):
        mine = [int(t[1:]) for t in got if t.startswith(name)]
        assert mine == sorted(mine), f"{name}'s events out of order: {mine}"
        if len(mine) < n:  # some were not stored: the writer was told, at a later append
            assert told[name] > 0, f"{name} lost {n - len(mine)} events without a word"
    assert page.task.status.state is TaskState.COMPLETED


async def test_a_failing_call_fails_alone_in_its_batch(redis_server: RedisServer) -> None:
    async with open_redis_store(redis_server.url) as store:
        task = new_task()
        await store.create(task)
        # A push-config hash of the wrong type: that call's script raises in Redis.
        await store.conn.client.set(store.keys.push(task.id), "not a hash")
        others = [new_task() for _ in range(5)]
        results: dict[str, object] = {}

        async def create(t: Task) -> None:
            await store.create(t)
            results[t.id] = "ok"

        async def broken() -> None:
            try:
                await store.push_configs(task.id)
            except ServerUnavailable as exc:
                results["broken"] = str(exc)

        async with anyio.create_task_group() as tg:  # queued together: one batch
            tg.start_soon(broken)
            for t in others:
                tg.start_soon(create, t)
        assert "WRONGTYPE" in str(results["broken"]) or "wrong kind" in str(results["broken"])
        for t in others:
            assert results[t.id] == "ok"
            assert (await store.get(t.id))[1] == 0



async def test_a_runs_events_and_its_end_share_one_batch(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's pushed events wait a few turns of the loop for what follows them: a run that
    works, emits an artifact and completes sends its three appends in one batch (the first
    pushed event used to go alone, the rest in the next batch); its two pushed events share
    one call (one check, one snapshot), its end has its own; and all of it is stored."""
    async with open_redis_store(redis_server.url) as store:
        batcher = store.conn.batcher
        send = batcher._send
        appends: list[list[int]] = []  # the events of each APPEND call, per batch sent

        async def counted(batch: list[Any]) -> None:
            await send(batch)  # (a gathered call's arguments are made as it is sent)
            appends.append([1 + (len(call.args) - 17) // 2 for call in batch
                            if call.which == append_number])

        append_number = batcher._index[scripts.APPEND]
        task = new_task()
        await store.create(task)
        await anyio.sleep(0.5)  # the store's first lease calls (sent at once) are done
        monkeypatch.setattr(batcher, "_send", counted)
        await store.append(task.id, status(task, TaskState.WORKING))
        await store.append(task.id, chunk(task, "0"))
        await store.append(task.id, status(task, TaskState.COMPLETED))
        assert [n for n in appends if n] == [[2, 1]], f"events per APPEND call: {appends}"
        page = await read_all(store, task.id)
        assert [e.position for e in page.entries] == [1, 2, 3]
        assert page.task.status.state is TaskState.COMPLETED
        assert page.task.artifacts is not None and page.task.artifacts[0].parts[0].text == "0"


async def test_one_call_stores_several_events_and_a_resent_call_stores_nothing_twice(
    redis_server: RedisServer,
) -> None:
    """A run's pushed events of one batch are one APPEND call (writer.py): every event is
    stored, in order, with the snapshot after the last. The same call sent again (a batch
    resent after a lost reply) is recognised by its op id, also once later events followed
    it, and stores nothing twice; a terminal task refuses it with a new op."""
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        task = new_task()
        await a.create(task)
        events = [status(task, TaskState.WORKING), chunk(task, "x", append=False),
                  chunk(task, "y")]
        folded, _ = await a.get(task.id)
        entries = []
        for position, event in enumerate(events, 1):
            apply_event(folded, event)
            entries.append(LogEntry(position, event, msgspec.json.encode(event)))
        keys, args = a.writer._call(task.id, entries[0], msgspec.json.encode(folded), folded, 0)
        for entry in entries[1:]:
            args += [KIND_OF[type(entry.event)], entry.encoded]
        script = a.conn.script(scripts.APPEND)
        assert await a.conn.run(script, keys, args) == [1, 3]
        assert await a.conn.run(script, keys, args) == [2, 3]  # resent: recognised
        await b.append(task.id, status(task, TaskState.COMPLETED))  # another process ends it
        assert await a.conn.run(script, keys, args) == [2, 3]  # still recognised
        fresh = [*args[:1], "another op", *args[2:]]
        assert (await a.conn.run(script, keys, fresh))[0] == -2  # terminal: refused
        page = await read_all(b, task.id)
        assert [e.position for e in page.entries] == [1, 2, 3, 4]
        assert texts(page) == ["x", "y"]
        assert page.task.status.state is TaskState.COMPLETED
        assert page.task.artifacts is not None
        assert [p.text for p in page.task.artifacts[0].parts] == ["x", "y"]


async def test_a_run_pushing_a_burst_lets_others_run_and_stores_it_whole(
    redis_server: RedisServer,
) -> None:
    """A run pushing events yields at its first event of a batch and at every YIELD_EVERY-th
    after it (writer.py), not at each: another task still runs during a long burst, the
    burst's events travel together rather than a few per batch, and all are stored in order."""
    n = 320
    async with open_redis_store(redis_server.url) as store:
        task = new_task()
        await store.create(task)
        turns = 0
        bursting = True

        async def other() -> None:
            nonlocal turns
            while bursting:
                turns += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            await anyio.sleep(0.05)  # (the other task runs, the store's first calls are done)
            before = turns
            batches = store.conn.batcher.batches
            await store.append(task.id, status(task, TaskState.WORKING))
            for i in range(n):
                await store.append(task.id, chunk(task, f"{i} ", append=i > 0))
            during = turns - before
            bursting = False
        await store.append(task.id, status(task, TaskState.COMPLETED))
        batches = store.conn.batcher.batches - batches
        assert during >= n // YIELD_EVERY, f"the other task ran {during} times"
        assert during < n // 2, f"the run yielded about {during} times for {n} events"
        assert batches < n // 8, f"{batches} batches for {n} events"
        page = await read_all(store, task.id)
        assert [e.position for e in page.entries] == list(range(1, n + 3))
        assert texts(page) == [f"{i} " for i in range(n)]
        assert page.task.status.state is TaskState.COMPLETED


async def test_a_long_burst_goes_in_bounded_calls_each_with_the_snapshot_after_its_last_event(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One call carries at most MAX_GATHERED events (one script call holds Redis for its whole
    run); a burst longer than that goes in several calls, and each stores the task as it is
    after its own last event, not after events that follow it in another call."""
    monkeypatch.setattr(writer_module, "MAX_GATHERED", 5)
    async with open_redis_store(redis_server.url) as store:
        batcher = store.conn.batcher
        send = batcher._send
        append_number = batcher._index[scripts.APPEND]
        calls: list[tuple[int, int, int]] = []  # (last position, events, artifact parts)

        async def counted(batch: list[Any]) -> None:
            await send(batch)  # (a gathered call's arguments are made as it is sent)
            for call in batch:
                if call.which == append_number and call.args[4]:
                    events = 1 + (len(call.args) - 17) // 2
                    snap = msgspec.json.decode(call.args[4])
                    parts = len(snap["artifacts"][0]["parts"]) if snap.get("artifacts") else 0
                    calls.append((int(call.args[0]) + events, events, parts))

        task = new_task()
        await store.create(task)
        await anyio.sleep(0.5)  # the store's first lease calls (sent at once) are done
        monkeypatch.setattr(batcher, "_send", counted)
        await store.append(task.id, status(task, TaskState.WORKING))  # position 1
        for i in range(40):  # chunk i at position i + 2: the task then has i + 1 parts
            await store.append(task.id, chunk(task, f"{i} ", append=i > 0))
        await store.append(task.id, status(task, TaskState.COMPLETED))
        pushed = [c for c in calls if c[0] <= 41]
        assert sum(events for _, events, _ in pushed) == 41, calls
        assert max(events for _, events, _ in pushed) <= 5, calls
        assert all(parts == last - 1 for last, _, parts in pushed), calls
        page = await read_all(store, task.id)
        assert [e.position for e in page.entries] == list(range(1, 43))
        assert texts(page) == [f"{i} " for i in range(40)]
        assert page.task.artifacts is not None and len(page.task.artifacts[0].parts) == 40
