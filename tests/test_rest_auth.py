"""Authentication and ownership over HTTP+JSON: the same rules as JSON-RPC, REST-shaped errors.

A caller without a credential gets 401 with ``WWW-Authenticate`` and the REST error body; another
owner's task is 404 (not 403: no oracle for task ids) on every task route; ListTasks lists only
the caller's own tasks. Real HTTP through hypercorn, both backends.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys

from .helpers import served, text_message
from .test_auth_matrix import asking_agent

pytestmark = pytest.mark.anyio


@pytest.fixture
def app(tmp_path: Path) -> A2AApp:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-secret\nbob:bob-secret\n")
    return A2AApp(asking_agent, authenticate=Authenticator([ApiKeys(keys)]), grace=1.0)


def who(secret: str) -> dict[str, str]:
    return {"X-API-Key": secret, "A2A-Version": "1.0"}


async def test_rest_without_a_credential_is_401_with_the_rest_error_body(app: A2AApp) -> None:
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        for verb, path in (("POST", "message:send"), ("GET", "tasks"), ("GET", "tasks/x"),
                           ("POST", "tasks/x:cancel"), ("GET", "extendedAgentCard")):
            r = await client.request(verb, url + path, json={"message": text_message("hi")}
                                     if verb == "POST" else None)
            assert r.status_code == 401, (path, r.text)
            assert "www-authenticate" in r.headers
            error = r.json()["error"]
            assert error["code"] == 401 and error["status"] == "UNAUTHENTICATED"
        wrong = await client.get(url + "tasks", headers=who("nobody"))
        assert wrong.status_code == 401
        # The public card stays readable.
        assert (await client.get(url + ".well-known/agent-card.json")).status_code == 200
    assert app.auth_failures == 6


async def test_rest_callers_see_only_their_own_tasks(app: A2AApp) -> None:
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        sent = await client.post(url + "message:send", headers=who("alice-secret"),
                                 json={"message": text_message("ask")})
        assert sent.status_code == 200, sent.text
        task = sent.json()["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        tid = task["id"]
        own = await client.get(url + f"tasks/{tid}", headers=who("alice-secret"))
        assert own.status_code == 200 and own.json()["id"] == tid
        for verb, path, body in (
            ("GET", f"tasks/{tid}", None),
            ("POST", f"tasks/{tid}:cancel", {}),
            ("POST", f"tasks/{tid}:subscribe", None),
            ("POST", "message:send",
             {"message": text_message("answer for alice", taskId=tid)}),
        ):
            r = await client.request(verb, url + path, headers=who("bob-secret"), json=body)
            assert r.status_code == 404, (path, r.text)
            assert r.json()["error"]["status"] == "NOT_FOUND"
        listed = await client.get(url + "tasks", headers=who("bob-secret"))
        assert listed.json()["tasks"] == [] and listed.json()["totalSize"] == 0
        # Alice's task is untouched by Bob's attempts: still waiting for her answer.
        answer = await client.post(url + "message:send", headers=who("alice-secret"),
                                   json={"message": text_message("yes", taskId=tid)})
        done = answer.json()["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["status"]["message"]["parts"][0]["text"] == "alice said yes"
