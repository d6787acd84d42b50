"""A replica SIGKILLed with runs in flight leaves nothing stuck (store/liveness.py).

Two real ``serve`` processes on one Redis, each with a worker, a 2 s liveness lease and a 4 s
claim idle. Replica A gets 50 interactive streams (each message with a fixed messageId, as a
client that resends it would have) and 50 detached sends are queued; A is SIGKILLed while all
of them are in flight. Then, within the lease plus 5 s, every interactive task reads canceled
with the reason ``process-lost`` on B; each message resent through B runs once more (a new
task, completed; a second resend answers with that same task); every detached run completes
exactly once. The tests whose assertions are the same on PostgreSQL (a lone server restarted,
a resend through another replica) are in tests/fleet/test_fleet_lease.py, once for both stores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.store.liveness import LOST_REASON
from scoped_a2a.store.redis import open_redis_store

from ..helpers import rpc, sse_events, text_message
from .conftest import Proc, RedisServer
from .util import log_of, wait_until_ended

pytestmark = [pytest.mark.anyio, pytest.mark.one_python]  # conftest: 3.11 only
LEASE = 2.0
INTERACTIVE = 50
DETACHED = 50
V1 = {"A2A-Version": "1.0"}


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_sigkill_a_replica_with_runs_in_flight(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    opts = ["--store", redis_server.url, "--port", "0", "--lease", str(LEASE),
            "--claim-idle", "4"]
    a = spawn("serve", *opts)
    b = spawn("serve", *opts)
    url_a, url_b = await a.url(), await b.url()
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    messages = [text_message(f"sleep-in {a.pid} 120") for _ in range(INTERACTIVE)]
    interactive: dict[str, dict[str, Any]] = {}  # task id -> its message
    streamed = anyio.Event()
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def stream_on_a(message: dict[str, Any]) -> None:
            req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                   "params": {"message": message}}
            try:
                async with client.stream("POST", url_a, json=req, headers=V1) as resp:
                    async for _, event in sse_events(resp):
                        task = event["result"].get("task")
                        if task is not None:
                            interactive[task["id"]] = message
                            if len(interactive) == INTERACTIVE:
                                streamed.set()
            except httpx.HTTPError:
                pass  # the replica was killed under it

        detached: list[str] = []
        async with anyio.create_task_group() as tg:
            for message in messages:
                tg.start_soon(stream_on_a, message)
            for i in range(DETACHED):
                sent = await rpc(client, url_a if i % 2 else url_b, "SendMessage", {
                    "message": text_message("first-sleep 3"),
                    "configuration": {"returnImmediately": True}})
                detached.append(sent["result"]["task"]["id"])
            with anyio.fail_after(60):
                await streamed.wait()
            async with open_redis_store(redis_server.url) as store:
                # Every interactive run has started on A, and some detached ones too.
                with anyio.fail_after(60):
                    while True:
                        started = [(await log_of(store, t))[0] for t in interactive]
                        if all(started):
                            break
                        await anyio.sleep(0.1)
                await a.wait_for(r"run start task=\S+ .*mode=detached")
                a.kill()
                killed = time.monotonic()
            tg.cancel_scope.cancel()

        # Within the lease plus 5 s: every interactive task reads canceled, process-lost.
        pending = set(interactive)
        with anyio.fail_after(LEASE + 5):
            while pending:
                for task_id in list(pending):
                    got = (await rpc(client, url_b, "GetTask", {"id": task_id}))["result"]
                    status = got["status"]
                    if status["state"] != "TASK_STATE_WORKING":
                        assert status["state"] == "TASK_STATE_CANCELED", got
                        assert status["message"]["metadata"] == {"reason": LOST_REASON}, got
                        pending.discard(task_id)
                await anyio.sleep(0.1)
        lost_after = time.monotonic() - killed
        print(f"all {INTERACTIVE} interactive tasks canceled {lost_after:.2f} s after SIGKILL")

        # Each message resent through B runs once more, as a new task; a second resend is it.
        reruns: dict[str, str] = {}

        async def resend(task_id: str) -> None:
            message = interactive[task_id]
            first = (await rpc(client, url_b, "SendMessage", {"message": message}))["result"]
            again = (await rpc(client, url_b, "SendMessage", {"message": message}))["result"]
            assert first["task"]["id"] != task_id, first
            assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED", first
            assert again["task"]["id"] == first["task"]["id"], (first, again)
            reruns[task_id] = first["task"]["id"]

        async with anyio.create_task_group() as tg:
            for task_id in interactive:
                tg.start_soon(resend, task_id)
        assert len(set(reruns.values())) == INTERACTIVE
        for new_id in reruns.values():
            assert b.text().count(f"run start task={new_id} ") == 1

    # Every detached run completes exactly once (A's in-flight ones taken over by B's worker).
    async with open_redis_store(redis_server.url) as store:
        tasks = await wait_until_ended(store, detached, timeout=60)
        assert [t.status.state.name for t in tasks] == ["COMPLETED"] * DETACHED
        taken_over = 0
        for task_id in detached:
            starts, states = await log_of(store, task_id)
            assert states.count("COMPLETED") == 1, (task_id, states)
            taken_over += any(s["attempt"] == 2 for s in starts)
        assert taken_over >= 1  # some were in flight on A when it was killed
