"""The run queue's rules, step by step in this process: one lease holder at a time, writes fenced
by the lease, redelivery after the idle time counted as a new attempt, retirement on the end."""

from __future__ import annotations

import anyio
import pytest

from scoped_a2a.protocol.types import TaskState
from scoped_a2a.store.base import TaskEnded
from scoped_a2a.store.redis import open_redis_store

from .conftest import RedisServer
from .test_redis_store import new_task, status, tick

pytestmark = pytest.mark.anyio


async def test_a_run_is_leased_to_one_worker_at_a_time_and_a_stale_one_cannot_write(
    redis_server: RedisServer,
) -> None:
    async with open_redis_store(redis_server.url) as store:
        queue = store.queue
        task = new_task()
        assert task.history
        await queue.submit(task, task.history[0], request_metadata={"k": "v"},
                           detach_reason="test")
        assert (await store.get(task.id))[0].status.state is TaskState.SUBMITTED
        await queue.prepare()
        (job,) = await queue.read_new("w1", 10, 100)
        assert (job.task_id, job.request_metadata, job.detach_reason) == (task.id, {"k": "v"},
                                                                           "test")
        attempt, snapshot = await queue.claim(job, "token-1", 300)
        assert attempt == 1 and snapshot is not None and snapshot.id == task.id
        assert (await queue.claim(job, "token-2", 300))[0] == -2  # busy: never twice at once

        with store.fenced(task.id, "token-1"):
            await store.append(task.id, tick(task, 1))
        with store.fenced(task.id, "token-2"), pytest.raises(TaskEnded):
            await store.append(task.id, tick(task, 2))  # not the lease holder: refused

        await anyio.sleep(0.5)  # worker 1 went silent: its lease and the entry's idle time run out
        (again,) = await queue.reclaim("w2", 10, 300)
        assert again.entry_id == job.entry_id
        assert (await queue.claim(again, "token-2", 300))[0] == 2  # the second attempt
        with store.fenced(task.id, "token-1"), pytest.raises(TaskEnded):
            await store.append(task.id, tick(task, 3))  # the stale worker is fenced off
        assert await queue.renew(job, "w1", "token-1", 300) == -1  # and learns it lost the run
        assert await queue.renew(again, "w2", "token-2", 300) == 1

        assert await queue.retire(again, "token-2") is False  # not ended: stays queued
        assert (await queue.claim(again, "token-2", 300))[0] == 3
        with store.fenced(task.id, "token-2"):
            await store.append(task.id, status(task, TaskState.COMPLETED, "done"))
        assert await queue.retire(again, "token-2") is True
        assert await store.conn.client.xlen(queue.key) == 0
        assert await store.conn.client.exists([store.keys.lease(task.id)]) == 0
        assert [e.position for e in (await store.read(task.id, 0)).entries] == [1, 2]
