"""Two server processes on one Redis: what one replica starts, the other sees and can cancel.

Replica A (``serve --store redis://...`` with its worker) and replica B (``--no-worker``) are
real ``python -m scoped_a2a`` processes on the test's backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.protocol.trajectory import TRAJECTORY_EXTENSION_URI

from ..helpers import rpc, sse_events, text_message
from .conftest import Proc, RedisServer

pytestmark = pytest.mark.anyio
V1_TRAJECTORY = {"A2A-Version": "1.0", "A2A-Extensions": TRAJECTORY_EXTENSION_URI}


def stream_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def wait_for_state(client: httpx.AsyncClient, url: str, task_id: str, state: str) -> None:
    with anyio.fail_after(20):
        while (await rpc(client, url, "GetTask", {"id": task_id}))["result"]["status"][
                "state"] != state:
            await anyio.sleep(0.05)


async def test_send_on_a_then_get_subscribe_and_cancel_on_b(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    # A long claim idle: A's heartbeat (every claim_idle / 4) cannot be what stops a run in time.
    a = spawn("serve", "--store", redis_server.url, "--port", "0", "--claim-idle", "60")
    b = spawn("serve", "--store", redis_server.url, "--port", "0", "--no-worker")
    url_a, url_b = await a.url(), await b.url()
    async with httpx.AsyncClient(timeout=30) as client:
        # 1. A run streamed on A; B subscribes and sees the same events, in the same order.
        on_a: list[tuple[int | None, dict[str, Any]]] = []
        on_b: list[tuple[int | None, dict[str, Any]]] = []
        first = anyio.Event()

        async def stream_on_a() -> None:
            req = stream_request("SendStreamingMessage", {"message": text_message("tick 1")})
            async with client.stream("POST", url_a, json=req, headers=V1_TRAJECTORY) as resp:
                async for event in sse_events(resp):
                    on_a.append(event)
                    first.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stream_on_a)
            await first.wait()
            task_id = on_a[0][1]["result"]["task"]["id"]
            await wait_for_state(client, url_b, task_id, "TASK_STATE_WORKING")
            req = stream_request("SubscribeToTask", {"id": task_id})
            async with client.stream("POST", url_b, json=req, headers=V1_TRAJECTORY) as resp:
                on_b = [event async for event in sse_events(resp)]
        ids_a, ids_b = [i for i, _ in on_a], [i for i, _ in on_b]
        assert ids_a == sorted(set(ids_a)) and ids_b == sorted(set(ids_b))
        assert "task" in on_b[0][1]["result"]  # the snapshot, then live events
        assert len(on_b) > 3
        by_id = {i: e["result"] for i, e in on_a}
        assert [e["result"] for _, e in on_b[1:]] == [by_id[i] for i in ids_b[1:]]
        assert on_b[-1][1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        got = await rpc(client, url_b, "GetTask", {"id": task_id})
        assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"

        # 2. An interactive run executing on A (a silent 30 s sleep) is cancelled from B.
        ended_on_a: list[dict[str, Any]] = []
        started = anyio.Event()
        holder: dict[str, str] = {}

        async def hold_on_a() -> None:
            req = stream_request("SendStreamingMessage", {"message": text_message("sleep 30")})
            async with client.stream("POST", url_a, json=req, headers=V1_TRAJECTORY) as resp:
                async for _, event in sse_events(resp):
                    holder.setdefault("id", event["result"].get("task", {}).get("id", ""))
                    started.set()
                    ended_on_a.append(event["result"])

        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(hold_on_a)
                await started.wait()
                await wait_for_state(client, url_b, holder["id"], "TASK_STATE_WORKING")
                cancelled = await rpc(client, url_b, "CancelTask", {"id": holder["id"]})
                assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        last = ended_on_a[-1]["statusUpdate"]["status"]
        assert last["state"] == "TASK_STATE_CANCELED"  # A's own stream ended with it
        assert last["message"]["metadata"] == {"reason": "CancelTask"}
        # A's run stopped (by B's cancel signal, or as its last holder left on that status).
        await a.wait_for(rf"run end task={holder['id']} outcome=canceled", timeout=10)

        # 3. A detached run queued through B executes on A's worker; B cancels it.
        sent = await rpc(client, url_b, "SendMessage", {
            "message": text_message("sleep 30"), "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]
        await wait_for_state(client, url_b, task_id, "TASK_STATE_WORKING")
        await a.wait_for(rf"run start task={task_id} .*mode=detached")
        cancelled = await rpc(client, url_b, "CancelTask", {"id": task_id})
        assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        await a.wait_for(rf"run end task={task_id} outcome=canceled .*reason=CancelTask",
                         timeout=10)
        assert f"run start task={task_id}" not in b.text()
