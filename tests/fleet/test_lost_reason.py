"""A run whose process's lease lapsed while the process lives on (a partition, a stall) is
recorded with the lost-process reason even when its holder hears the reaper's cancel request
first (store/liveness.py: cancel_reason), on Redis and on PostgreSQL, both backends.

In this process: replica A (an app over its own store connection, served through hypercorn)
runs a blocking send; A's lease is made to read lapsed in the store; replica B hands A's runs
out (``leases.lapsed``: that announces each task's cancellation to every process) and only
once A's run has ended records the end itself, as a slow reaper would. The recorded end, and
the answer A's caller gets, say ``process-lost``, not ``CancelTask``, so a resend of the
message runs it again (server/resend.py).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.store.liveness import LOST_REASON, record_lost

from ..helpers import rpc, served, text_message
from ..redis.agents import probe_agent
from .conftest import Fleet

pytestmark = pytest.mark.anyio


async def _runs_of(fleet: Fleet, store: Any, process: str) -> list[str]:
    """The tasks the store says ``process``'s lease covers."""
    if fleet.kind == "redis":
        members = await store.conn.client.smembers(f"{store.conn.keys.base}proc:{process}")
        return [bytes(m).decode() for m in members]
    rows = await store.pool.query("SELECT id FROM tasks WHERE process = %s", (process,))
    return [str(r[0]) for r in rows]


async def _lapse(fleet: Fleet, store: Any, process: str) -> None:
    """Make ``process``'s lease read as run out (as if it had not renewed it for long)."""
    if fleet.kind == "redis":
        await store.conn.client.zadd(store.conn.keys.processes, {process: 0})
    else:
        await store.pool.run(lambda c: c.execute(
            "UPDATE processes SET expires = 0 WHERE id = %s", (process,)))


async def test_a_lapsed_holder_that_hears_the_cancel_first_records_process_lost(
    fleet: Fleet,
) -> None:
    # A long lease: neither store renews (nor reaps) again during the test by itself.
    async with fleet.store(lease=60) as a, fleet.store(lease=60) as b:
        me = a.leases.process_id
        await a.leases.beat()
        answer: dict[str, Any] = {}
        async with served(A2AApp(probe_agent, store=a)) as url, \
                httpx.AsyncClient(timeout=60) as client:
            async def send() -> None:
                answer.update(await rpc(client, url, "SendMessage",
                                        {"message": text_message("sleep 60")}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                with anyio.fail_after(20):
                    while not (running := await _runs_of(fleet, a, me)):
                        await anyio.sleep(0.02)
                (task_id,) = running
                await _lapse(fleet, a, me)
                handed = await b.leases.lapsed()  # announces the cancel to every process
                assert handed == [(me, [task_id])], handed
                with anyio.fail_after(20):  # A heard it and ended its run first
                    while not (await b.get(task_id))[0].status.state.terminal:
                        await anyio.sleep(0.02)
                assert not await record_lost(b, task_id)  # the reaper comes too late
        task, _ = await b.get(task_id)
    assert "result" in answer, answer
    answered = answer["result"]["task"]["status"]
    assert answered["state"] == "TASK_STATE_CANCELED", answered
    assert answered["message"]["metadata"]["reason"] == LOST_REASON, answered
    assert task.status.message is not None, task.status
    assert task.status.message.metadata == {"reason": LOST_REASON}, task.status
