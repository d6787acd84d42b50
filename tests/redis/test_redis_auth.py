"""Owners on Redis: a task created through one replica is its owner's on every replica.

Two real ``serve --store redis://... --api-keys FILE`` processes share one Redis; the owner is a
field of the task's hash, so replica B refuses bob alice's task that replica A stored (and a
queued detached run executed by a worker still knows its owner).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from ..helpers import text_message
from .conftest import Proc, RedisServer

pytestmark = pytest.mark.anyio


async def call(client: httpx.AsyncClient, url: str, key: str, method: str,
               params: dict[str, object]) -> dict[str, object]:
    r = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                     "params": params},
                          headers={"A2A-Version": "1.0", "X-API-Key": key})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_another_owners_task_is_not_found_on_every_replica(
    redis_server: RedisServer, spawn: Callable[..., Proc], tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-secret\nbob:bob-secret\n")
    a = spawn("serve", "--store", redis_server.url, "--port", "0", "--api-keys", str(keys))
    b = spawn("serve", "--store", redis_server.url, "--port", "0", "--no-worker",
              "--api-keys", str(keys))
    url_a, url_b = await a.url(), await b.url()
    async with httpx.AsyncClient(timeout=30) as client:
        # A detached send: stored and queued in one script, executed by A's worker.
        sent = await call(client, url_a, "alice-secret", "SendMessage", {
            "message": text_message("hello"), "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]  # type: ignore[index]
        with anyio.fail_after(20):
            while True:
                got = await call(client, url_b, "alice-secret", "GetTask", {"id": task_id})
                if got["result"]["status"]["state"] == "TASK_STATE_COMPLETED":  # type: ignore
                    break
                await anyio.sleep(0.05)
        for url in (url_a, url_b):
            for method, params in [
                ("GetTask", {"id": task_id}),
                ("CancelTask", {"id": task_id}),
                ("SubscribeToTask", {"id": task_id}),
                ("ListTaskPushNotificationConfigs", {"taskId": task_id}),
                ("scoped_a2a/trajectory/read", {"taskId": task_id, "after": 0}),
                ("SendMessage", {"message": text_message("mine now", taskId=task_id)}),
            ]:
                answer = await call(client, url, "bob-secret", method, params)
                assert answer["error"]["code"] == -32001, (url, method, answer)  # type: ignore
            listed = await call(client, url, "bob-secret", "ListTasks", {})
            assert listed["result"]["tasks"] == []  # type: ignore[index]
            mine = await call(client, url, "alice-secret", "ListTasks", {})
            assert [t["id"] for t in mine["result"]["tasks"]] == [task_id]  # type: ignore
