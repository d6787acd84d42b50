"""Tenants: the 1.0 ``tenant`` field partitions tasks as principals do; a JWT may limit its
principal to some tenants. Real HTTP through hypercorn, both backends."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.bearer_jwt import JwtBearer

from .auth_tokens import AUDIENCE, ISSUER, SigningKey, jwks
from .helpers import served, text_message
from .test_auth_matrix import asking_agent, post

pytestmark = pytest.mark.anyio


async def test_tenants_partition_tasks_and_limit_principals(tmp_path: Path) -> None:
    key = SigningKey()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(key)))
    bearer = JwtBearer(str(tmp_path / "jwks.json"), issuer=ISSUER, audience=AUDIENCE,
                       tenants_claim="tenants")
    app = A2AApp(asking_agent, authenticate=Authenticator([bearer]))
    alice = key.token("alice", tenants=["t1", "t2", ""])
    bob = key.token("bob", tenants="t2")  # a space-separated string works too
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        outcome, sent = await post(client, url, alice, "SendMessage",
                                   {"message": text_message("ask"), "tenant": "t1"})
        assert outcome == "ok"
        task_id = sent["task"]["id"]
        # The same principal, another tenant (or none): not found, and not listed.
        for tenant in ("t2", None):
            params = {"id": task_id, **({"tenant": tenant} if tenant else {})}
            assert (await post(client, url, alice, "GetTask", params))[0] == -32001
            _, listed = await post(client, url, alice, "ListTasks",
                                   {"tenant": tenant} if tenant else {})
            assert listed["tasks"] == []
            follow = {"message": text_message("yes", taskId=task_id),
                      **({"tenant": tenant} if tenant else {})}
            assert (await post(client, url, alice, "SendMessage", follow))[0] == -32001
        for method, params in [
            ("GetTask", {"id": task_id}),
            ("ListTaskPushNotificationConfigs", {"taskId": task_id}),
            ("scoped_a2a/trajectory/read", {"taskId": task_id}),
            ("SubscribeToTask", {"id": task_id}),
        ]:
            outcome, _ = await post(client, url, alice, method, {**params, "tenant": "t1"})
            assert outcome == "ok", method
        _, listed = await post(client, url, alice, "ListTasks", {"tenant": "t1"})
        assert [t["id"] for t in listed["tasks"]] == [task_id]
        # bob may use t2 only: t1 and no tenant are refused (not "not found": his own limit).
        for params in ({"tenant": "t1"}, {}):
            outcome, err = await post(client, url, bob, "ListTasks", params)
            assert outcome == -32043, err
        assert (await post(client, url, bob, "ListTasks", {"tenant": "t2"}))[0] == "ok"
        assert (await post(client, url, bob, "GetTask", {"id": task_id, "tenant": "t2"}))[
            0] == -32001
        # The run finishes in its tenant.
        outcome, done = await post(client, url, alice, "SendMessage", {
            "message": text_message("yes", taskId=task_id), "tenant": "t1"})
        assert done["task"]["status"]["message"]["parts"][0]["text"] == "alice said yes"


async def test_rest_tenant_paths_partition_tasks_like_the_tenant_field() -> None:
    app = A2AApp(asking_agent)
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        sent = await client.post(url + "acme/message:send",
                                 json={"message": text_message("ask")})
        assert sent.status_code == 200, sent.text
        task_id = sent.json()["task"]["id"]
        assert (await client.get(url + f"acme/tasks/{task_id}")).status_code == 200
        # Another tenant, or none: not found, and not listed.
        assert (await client.get(url + f"other/tasks/{task_id}")).status_code == 404
        assert (await client.get(url + f"tasks/{task_id}")).status_code == 404
        assert (await client.get(url + "tasks")).json()["totalSize"] == 0
        listed = (await client.get(url + "acme/tasks")).json()
        assert [t["id"] for t in listed["tasks"]] == [task_id]
        # The JSON-RPC tenant field names the same partition.
        r = await client.post(url, headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "GetTask",
            "params": {"id": task_id, "tenant": "acme"}})
        assert r.json()["result"]["id"] == task_id
        # A body that names another tenant than the path is refused, and changes nothing.
        bad = await client.post(url + f"acme/tasks/{task_id}:cancel", json={"tenant": "other"})
        assert bad.status_code == 400
        answer = await client.post(url + "acme/message:send", json={
            "message": text_message("yes", taskId=task_id)})
        assert answer.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
