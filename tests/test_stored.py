"""Ended tasks packed (compressed) by the memory store read exactly as they did before packing.

In process: every read of a packed task (GetTask's snapshot, each page of the log for every
cursor and limit, ListTasks) equals the same read taken while the task was still plain JSON,
including logs of several compressed blocks and tasks packed over several steps; the byte budget
counts what is really held and still evicts oldest first. Over real HTTP (hypercorn, both
backends): GetTask with historyLength, ListTasks, trajectory pages, SubscribeToTask with
Last-Event-ID and the 0.3 dialect answer the same bytes before and after packing. And the
collector tuning ``serve`` applies once started.
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import httpx
import msgspec
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.types import (
    TaskState,
)
from scoped_a2a.server import gc_tuning
from scoped_a2a.store import cooling, memory, packed
from scoped_a2a.store.memory import MemoryTaskStore

from .helpers import rpc, served, sse_events, text_message
from .stored_tasks import alone_or_batched, chatter, every_read, is_packed, new_task, status

pytestmark = pytest.mark.anyio

encode = msgspec.json.encode


@pytest.mark.parametrize(("how", "block_bytes"),
                         [("alone", 64 << 10), ("alone", 700), ("batched", 0)])
async def test_a_packed_task_reads_exactly_as_it_did_plain(
        monkeypatch: pytest.MonkeyPatch, how: str, block_bytes: int) -> None:
    # 700-byte blocks: the log spans many blocks, so pages start and end inside them.
    # Batched: the task shares one stream with the small tasks that end after it.
    alone_or_batched(monkeypatch, how)
    monkeypatch.setattr(packed, "BLOCK_BYTES", block_bytes)
    store = MemoryTaskStore(max_events_per_task=50)  # the oldest events are dropped too
    await chatter(store, "t", pad=40)
    assert not is_packed(store, "t")  # the newest ended tasks stay plain
    before = await every_read(store, "t")
    later = 0
    while not is_packed(store, "t"):  # alone: the next end; batched: once a batch is full
        await chatter(store, f"later-{later}", steps=1)
        later += 1
    # Alone: packed as soon as it is no longer among the newest; batched: once the small
    # tasks gathered with it fill a batch.
    assert later == cooling.HOT_TASKS if how == "alone" else later > cooling.HOT_TASKS
    assert await every_read(store, "t") == before
    if how == "batched":
        assert store._tasks["t"].ended.batch is store._tasks["later-0"].ended.batch  # type: ignore[union-attr]
    elif block_bytes < 1000:
        assert len(store._tasks["t"].ended.blocks) > 5  # type: ignore[union-attr]
    # A reader's copy is its own: mutating it changes nothing stored.
    snap, _ = await store.get("t")
    snap.status.state = TaskState.FAILED
    assert (await store.get("t"))[0].status.state is TaskState.COMPLETED


async def test_a_large_task_is_packed_over_several_task_ends_and_readable_throughout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cooling, "HOT_TASKS", 1)
    monkeypatch.setattr(cooling, "STEP_BYTES", 2000)
    monkeypatch.setattr(cooling, "MAX_STEP_BYTES", 2000)
    monkeypatch.setattr(packed, "BLOCK_BYTES", 1000)
    store = MemoryTaskStore()
    await chatter(store, "big", pad=200)
    reads = await every_read(store, "big")
    ends = 0
    while not is_packed(store, "big"):
        await chatter(store, f"small-{ends}", steps=1)  # each end packs ~2,000 bytes more
        ends += 1
        assert (await store.get("big"))[0] == (await store.get("big"))[0]
        assert await every_read(store, "big") == reads
    assert ends > 3
    assert await every_read(store, "big") == reads


@pytest.mark.parametrize("how", ["alone", "batched"])
async def test_an_empty_log_and_a_log_cut_to_nothing_pack_too(
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    alone_or_batched(monkeypatch, how)
    monkeypatch.setattr(cooling, "BATCH_BYTES", 1)  # a batch of one: packed at its end
    monkeypatch.setattr(cooling, "HOT_TASKS", 0)
    store = MemoryTaskStore(max_events_per_task=1)
    await store.create(new_task("one"))
    await store.append("one", status("one", TaskState.WORKING, "a"))
    await store.append("one", status("one", TaskState.FAILED, "b"))
    assert is_packed(store, "one")
    page = await store.read("one", 0)
    assert [e.position for e in page.entries] == [2] and page.first_retained == 2
    assert page.task.status.state is TaskState.FAILED
    assert [m.parts[0].text for m in page.task.history or []] == ["go", "a", "b"]


async def test_the_budget_counts_packed_tasks_as_held_and_still_evicts_oldest_first() -> None:
    store = MemoryTaskStore()
    # Traced from the start: the warm-up tasks are packed during the measured part, and what
    # that frees must be seen by tracemalloc as well as by the count.
    tracemalloc.start()
    try:
        for i in range(50):
            await chatter(store, f"warm-{i}")
        gc.collect()
        held_before, counted_before = tracemalloc.get_traced_memory()[0], store.ended_bytes
        for i in range(300):
            await chatter(store, f"t-{i}")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - held_before
    finally:
        tracemalloc.stop()
    counted = store.ended_bytes - counted_before
    # The count never under-states what is held (so the budget bounds memory) nor over-states
    # it by much (so the budget is not wasted).
    assert held <= counted <= 1.5 * held
    plain = sum(memory.ENDED_TASK_OVERHEAD + memory.ENDED_EVENT_OVERHEAD * 64 + 15_000
                for _ in range(300))
    assert counted * 4 < plain  # packing keeps at least 4 times as many tasks in a budget

    budget = store.ended_bytes // 3
    small = MemoryTaskStore(max_ended_bytes=budget)
    for i in range(350):
        await chatter(small, f"t-{i}")
    assert small.ended_bytes <= budget
    kept = [i for i in range(350) if f"t-{i}" in small._tasks]
    # Oldest evicted first; the newest (plain, not yet packed) take most of a small budget.
    assert kept == list(range(kept[0], 350)) and 10 < len(kept) < 350
    with pytest.raises(TaskNotFound):
        await small.get("t-0")


async def test_a_task_evicted_while_being_packed_is_dropped_cleanly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cooling, "HOT_TASKS", 0)
    monkeypatch.setattr(cooling, "STEP_BYTES", 500)
    monkeypatch.setattr(cooling, "MAX_STEP_BYTES", 500)
    monkeypatch.setattr(packed, "BLOCK_BYTES", 500)
    store = MemoryTaskStore(max_ended_tasks=2)
    for i in range(6):
        await chatter(store, f"t-{i}", pad=100)
    assert len(store) == 2
    assert store.ended_bytes == sum(r.size for r in store._tasks.values())
    for task_id in store._tasks:
        assert (await store.get(task_id))[0].status.state is TaskState.COMPLETED


# --- over real HTTP ---------------------------------------------------------------------------

async def chatty(ctx: RunContext) -> str:
    for i in range(12):
        await ctx.working(f"step {i}")
        await ctx.trajectory({"type": "tool_call", "step": i, "pad": "q" * 50})
        if i % 4 == 0:
            await ctx.artifact(f"part {i} ", name="out", append=i > 0, last_chunk=i == 8)
    return "chatted"


async def sse(client: httpx.AsyncClient, url: str, method: str, params: dict[str, Any],
              headers: dict[str, str]) -> list[tuple[int | None, dict[str, Any]]]:
    req = {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}
    async with client.stream("POST", url, json=req, headers=headers) as resp:
        assert resp.status_code == 200
        return [e async for e in sse_events(resp)]


async def http_reads(client: httpx.AsyncClient, url: str, task_id: str) -> list[Any]:
    out: list[Any] = []
    for history in (None, 0, 1, 5):
        params: dict[str, Any] = {"id": task_id}
        if history is not None:
            params["historyLength"] = history
        out.append(await rpc(client, url, "GetTask", params))
        out.append(await rpc(client, url, "tasks/get", params, version=None))  # 0.3
    out.append(await rpc(client, url, "ListTasks", {"contextId": "ctx-stored"}))
    out.append(await rpc(client, url, "ListTasks", {"contextId": "ctx-stored",
                                                    "historyLength": 2, "pageSize": 1}))
    for after, limits in ((0, {}), (0, {"maxEvents": 5}), (7, {"maxBytes": 400}),
                          (30, {"maxEvents": 3, "maxBytes": 1}), (100, {})):
        out.append(await rpc(client, url, "scoped_a2a/trajectory/read",
                             {"taskId": task_id, "after": after, **limits}))
    v1 = {"A2A-Version": "1.0"}
    for last in ("0", "17"):
        out.append(await sse(client, url, "SubscribeToTask", {"id": task_id},
                             {**v1, "Last-Event-ID": last}))
        out.append(await sse(client, url, "tasks/resubscribe", {"id": task_id},
                             {"Last-Event-ID": last}))
    return out


async def test_every_read_over_http_answers_the_same_after_packing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cooling, "HOT_TASKS", 2)
    store = MemoryTaskStore()
    app = A2AApp(chatty, store=store)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        sent = await rpc(client, url, "SendMessage",
                         {"message": text_message("go", contextId="ctx-stored")})
        task_id = sent["result"]["task"]["id"]
        assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        before = await http_reads(client, url, task_id)
        assert not is_packed(store, task_id)
        for _ in range(3):
            await rpc(client, url, "SendMessage", {"message": text_message("later")})
        assert is_packed(store, task_id)
        after = await http_reads(client, url, task_id)
    assert after == before
    events = before[-4]  # SubscribeToTask from Last-Event-ID 0: the log (trajectory events
    ids = [i for i, _ in events]  # are left out without the extension), then the end
    assert ids == sorted(set(ids)) and ids[0] >= 1 and len(ids) > 3
    assert events[-1][1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


# --- the collector tuning serve applies -------------------------------------------------------

def test_gc_tuning_applies_once_and_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(gc_tuning, "_applied", False)
    monkeypatch.setattr(gc_tuning.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc_tuning.gc, "get_threshold", lambda: (700, 10, 10))
    monkeypatch.setattr(gc_tuning.gc, "set_threshold",
                        lambda *t: calls.append(f"threshold {t}"))
    monkeypatch.setenv(gc_tuning.ENV, "off")
    assert not gc_tuning.apply() and calls == []
    monkeypatch.delenv(gc_tuning.ENV)
    assert gc_tuning.apply()
    assert calls == ["freeze", f"threshold {(gc_tuning.GEN0_THRESHOLD, 10, 10)}"]
    assert not gc_tuning.apply() and len(calls) == 2  # once per process


@pytest.mark.parametrize("tune", [True, False])
async def test_serve_tunes_the_collector_once_started_unless_told_not_to(
        monkeypatch: pytest.MonkeyPatch, tune: bool) -> None:
    import anyio

    from scoped_a2a import serve

    calls: list[bool] = []
    monkeypatch.setattr(gc_tuning, "apply", lambda: calls.append(True) or True)
    app = A2AApp(chatty)
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: serve(app, port=0, shutdown=shutdown, gc_tuning=tune,
                                                 task_status=task_status))
        assert calls == ([True] if tune else [])
        shutdown.set()
