"""``serve --workers N`` over PostgreSQL (cli/workers.py): N processes on one port, one schema.

A real supervisor with two workers on the test's backend: both take connections (the kernel
spreads them, SO_REUSEPORT); conversations of ask -> answer, each message on a new connection
(so an answer often reaches the worker that does not hold the run: hand-over), all complete on
the worker that asked; a worker SIGKILLed under an interactive run is started again, and the
other records that run canceled (process-lost) once its lease lapses; SIGTERM stops all, exit 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.store.liveness import LOST_REASON
from scoped_a2a.store.postgres import open_postgres_store

from ..helpers import sse_events, text_message
from ..redis.conftest import Proc
from ..redis.test_redis_serve_workers import pid_of, until
from ..redis.util import post_json

pytestmark = [pytest.mark.anyio, pytest.mark.one_python]  # conftest: 3.11 only
CONVERSATIONS = 10
V1 = {"A2A-Version": "1.0"}


async def call(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC call over a new connection (the kernel picks a worker per connection)."""
    answer = await post_json(url, {"jsonrpc": "2.0", "id": 1, "method": method,
                                   "params": params}, hang_up_after_first_event=False)
    assert "result" in answer, str(answer)[:500]
    result: dict[str, Any] = answer["result"]
    return result


async def test_two_workers_over_postgres_hand_over_and_record_a_lost_worker(
    pg_url: str, serve: Callable[..., Proc],
) -> None:
    sup = serve(pg_url, "--workers", "2", "--lease", "2")
    await until(lambda: sup.text().count("serving on") >= 2, sup)
    workers = {int(i): int(p) for i, p in re.findall(r"worker (\d) started \(pid (\d+)\)",
                                                     sup.text())}
    assert len(workers) == 2, sup.text()
    url = (await sup.wait_for(r"serving on (http://\S+/)")).group(1)

    # Conversations: the answer goes over a new connection, to whichever worker the kernel
    # picks; each run completes where it asked, and both workers held some.
    holders: list[int] = []

    async def conversation(i: int) -> None:
        asked = (await call(url, "SendMessage", {"message": text_message("ask")}))["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
        answer = text_message(f"n{i}", taskId=asked["id"], contextId=asked["contextId"])
        final = (await call(url, "SendMessage", {"message": answer}))["task"]
        assert final["status"]["state"] == "TASK_STATE_COMPLETED", final
        assert final["status"]["message"]["parts"][0]["text"].startswith(f"hi n{i} "), final
        holders.append(pid_of(final))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(CONVERSATIONS):
                tg.start_soon(conversation, i)
    assert len(holders) == CONVERSATIONS
    assert set(holders) == set(workers.values()), (holders, workers)

    # A worker SIGKILLed under an interactive run (its caller still connected): started again;
    # the other worker records the run lost. The store says which worker holds it.
    ids: list[str] = []
    async with httpx.AsyncClient(timeout=60) as client, anyio.create_task_group() as tg:
        async def hold() -> None:
            req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                   "params": {"message": text_message("sleep 120")}}
            with contextlib.suppress(httpx.HTTPError):
                async with client.stream("POST", url, json=req, headers=V1) as resp:
                    async for _, event in sse_events(resp):
                        if "task" in event.get("result", {}):
                            ids.append(event["result"]["task"]["id"])

        tg.start_soon(hold)
        with anyio.fail_after(30):
            while not ids:
                await anyio.sleep(0.05)
        task_id = ids[0]
        await sup.wait_for(rf"run start task={task_id} ")
        async with open_postgres_store(pg_url, key_file=sup.log.parent / "push.key") as store:
            (row,) = await store.pool.query(
                "SELECT process FROM tasks WHERE id = %s", (task_id,))
        holder = int(row[0].split(":")[1])  # host:pid:nonce
        assert holder in workers.values(), (row, workers)
        os.kill(holder, signal.SIGKILL)
        tg.cancel_scope.cancel()
    assert ids[:1] == [task_id], ids
    with anyio.fail_after(2 + 10):
        while True:
            try:
                got = await call(url, "GetTask", {"id": task_id})
            except (anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                continue  # a connection queued on the killed worker's socket: reset
            if got["status"]["state"] != "TASK_STATE_WORKING":
                break
            await anyio.sleep(0.1)
    assert got["status"]["state"] == "TASK_STATE_CANCELED", got
    assert got["status"]["message"]["metadata"] == {"reason": LOST_REASON}, got
    await sup.wait_for(rf"\(pid {holder}\) exited with status -9; starting it again")

    sup.popen.send_signal(signal.SIGTERM)
    with anyio.fail_after(60):
        while sup.popen.poll() is None:
            await anyio.sleep(0.05)
    assert sup.popen.returncode == 0, sup.text()[-3000:]
