"""Small ended tasks packed together in batches read exactly as they did plain.

In process, against the memory store with its real thresholds: tasks of a few events (what an
echo agent leaves) are packed many to a stream; every read of every task (snapshot, log pages,
ListTasks over all of them, in an order that goes back and forth between batches) answers what it
did before packing; the byte budget counts what the batches really hold; tasks evicted while
waiting for their batch are left out cleanly. The HTTP reads of a batched task are in
test_stored.py (every read over HTTP, both ways of packing).
"""

from __future__ import annotations

import gc
import random
import tracemalloc

import msgspec
import pytest

from scoped_a2a.protocol.ids import new_id
from scoped_a2a.protocol.types import ListTasksRequest, TaskState
from scoped_a2a.store import batched, cooling
from scoped_a2a.store.memory import MemoryTaskStore

from .stored_tasks import alone_or_batched, chatter, every_read, is_packed, new_task, status

pytestmark = pytest.mark.anyio

encode = msgspec.json.encode


async def small_task(store: MemoryTaskStore, task_id: str, context: str = "c") -> None:
    """A task like the echo agent's: submitted, working, completed with a reply."""
    await store.create(new_task(task_id, context))
    await store.append(task_id, status(task_id, TaskState.WORKING))
    await store.append(task_id, status(task_id, TaskState.COMPLETED, f"reply to {task_id}"))


async def listed(store: MemoryTaskStore) -> list[bytes]:
    out: list[bytes] = []
    token = ""
    while True:
        page = await store.list_tasks(ListTasksRequest(page_size=7, page_token=token or None,
                                                       history_length=1))
        out += [encode(t) for t in page.tasks]
        token = page.next_page_token
        if not token:
            return out


async def test_many_small_tasks_share_batches_and_read_exactly_as_plain(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cooling, "HOT_TASKS", 0)
    monkeypatch.setattr(cooling, "BATCH_BYTES", 8 << 10)  # several batches from 100 tasks
    store = MemoryTaskStore()
    ids = [f"t-{i}" for i in range(100)]
    reads = {}
    for task_id in ids:
        await small_task(store, task_id, context=f"c{int(task_id[2:]) % 3}")
        reads[task_id] = await every_read(store, task_id)  # taken while still plain
    before_list = await listed(store)
    for i in range(30):  # fill the last batch and a few more
        await small_task(store, f"more-{i}")
    batches = {id(store._tasks[t].ended.batch) for t in ids}  # type: ignore[union-attr]
    assert all(is_packed(store, t) for t in ids) and len(batches) > 3
    order = ids[:]
    random.Random(7).shuffle(order)  # back and forth between batches: no stale cached JSON
    for task_id in order:
        assert await every_read(store, task_id) == reads[task_id], task_id
    assert (await listed(store))[-100:] == before_list


async def test_batched_tasks_count_what_they_hold_and_much_less_than_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    counted: dict[str, int] = {}
    for how in ("batched", "alone"):
        alone_or_batched(monkeypatch, how)
        store = MemoryTaskStore()
        tracemalloc.start()
        try:
            for _ in range(100):  # ids as the server makes them (their size counts)
                await small_task(store, new_id(), context=new_id())
            gc.collect()
            held_before, counted_before = tracemalloc.get_traced_memory()[0], store.ended_bytes
            for _ in range(1000):
                await small_task(store, new_id(), context=new_id())
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - held_before
        finally:
            tracemalloc.stop()
        counted[how] = store.ended_bytes - counted_before
        # Never under-stated (the budget bounds memory), not over-stated by much.
        assert held <= counted[how] <= 1.5 * held, how
    assert counted["batched"] < 0.85 * counted["alone"]


async def test_tasks_evicted_while_gathered_are_left_out_of_their_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cooling, "HOT_TASKS", 0)
    monkeypatch.setattr(cooling, "BATCH_BYTES", 4 << 10)
    store = MemoryTaskStore(max_ended_tasks=3)
    for i in range(40):
        await small_task(store, f"t-{i}")
    assert sorted(store._tasks) == ["t-37", "t-38", "t-39"]
    assert store.ended_bytes == sum(r.size for r in store._tasks.values())
    for task_id in store._tasks:
        task, _ = await store.get(task_id)
        assert task.status.state is TaskState.COMPLETED
        assert task.history and task.history[-1].parts[0].text == f"reply to {task_id}"


async def test_a_large_task_is_packed_alone_between_small_ones_in_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cooling, "HOT_TASKS", 0)
    monkeypatch.setattr(cooling, "BATCH_BYTES", 4 << 10)
    store = MemoryTaskStore()
    for i in range(5):
        await small_task(store, f"a-{i}")
    await chatter(store, "big", pad=200)  # well over SMALL_TASK_BYTES
    big = await every_read(store, "big")
    for i in range(10):
        await small_task(store, f"b-{i}")
    ended = store._tasks["big"].ended
    assert not isinstance(ended, batched.InBatch) and is_packed(store, "big")
    assert await every_read(store, "big") == big
    assert isinstance(store._tasks["a-0"].ended, batched.InBatch)
    assert isinstance(store._tasks["b-0"].ended, batched.InBatch)
