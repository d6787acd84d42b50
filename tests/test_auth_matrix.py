"""Every method x every kind of credential, over real hypercorn, with the expected answer.

Rows: no credential, malformed, expired, wrong audience, wrong key, ``alg: none``,
HMAC confusion (HS256 keyed with the RSA public key's PEM), a valid token of another principal,
a valid token of the owner. Columns: every A2A 1.0 method plus the trajectory read.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.push import PushSettings
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.bearer_jwt import JwksKeys, JwtBearer

from .auth_tokens import (
    AUDIENCE,
    ISSUER,
    SigningKey,
    hmac_confused_token,
    jwks,
    unsigned_token,
)
from .helpers import served, text_message

pytestmark = pytest.mark.anyio

UNAUTH = -32040


async def asking_agent(ctx: RunContext) -> str:
    """Parks on input when asked to, so follow-ups, subscribe and cancel have a live task."""
    if ctx.text.startswith("ask"):
        reply = await ctx.ask("more?")
        return f"{ctx.principal.id} said {reply}"
    return f"hello {ctx.principal.id}"


def jwt_app(jwks_file: Path, **kw: Any) -> A2AApp:
    bearer = JwtBearer(JwksKeys(str(jwks_file)), issuer=ISSUER, audience=AUDIENCE)
    return A2AApp(
        asking_agent, authenticate=Authenticator([bearer]), grace=1.0,
        extended_card={"description": "the extended card"},
        push=PushSettings(allow_hosts=["127.0.0.1"], shutdown_grace=0.2, retry_for=0.5),
        **kw,
    )


Outcome = str | int  # "401", "ok", or a JSON-RPC error code


async def post(client: httpx.AsyncClient, url: str, token: str | None, method: str,
               params: Any, *, version: str | None = "1.0") -> tuple[Outcome, Any]:
    headers = {"A2A-Version": version} if version else {}
    if token is not None:
        headers["Authorization"] = token if token.startswith("Bearer") else f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    async with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            await r.aread()
            if r.status_code == 401:
                assert r.headers["www-authenticate"].startswith("Bearer")
                err = r.json()["error"]
                assert err["code"] == UNAUTH
                # The same words whatever was wrong: no hint for a guesser.
                assert "authentication required" in err["message"]
            return str(r.status_code), r.text
        if r.headers["content-type"].startswith("text/event-stream"):
            with anyio.fail_after(10):
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        frame = json.loads(line[5:])
                        break
        else:
            frame = json.loads(await r.aread())
    if "error" in frame:
        return int(frame["error"]["code"]), frame["error"]
    return "ok", frame["result"]


async def park(client: httpx.AsyncClient, url: str, token: str, *, version: str = "1.0",
               ) -> str:
    """A task of ``token``'s principal waiting for input; its id."""
    v1 = version == "1.0"
    params: dict[str, Any] = {"message": text_message("ask", v1=v1)}
    outcome, result = await post(client, url, token,
                                 "SendMessage" if v1 else "message/send", params,
                                 version=version if v1 else None)
    assert outcome == "ok", result
    task = result["task"] if v1 else result
    state = task["status"]["state"]
    assert state in ("TASK_STATE_INPUT_REQUIRED", "input-required"), task
    return str(task["id"])


Call = Callable[[httpx.AsyncClient, str, "str | None", str], Awaitable[tuple[Outcome, Any]]]


def _follow_up(task_id: str) -> dict[str, Any]:
    return {"message": text_message("yes", taskId=task_id)}


METHODS: dict[str, tuple[Call, bool]] = {
    # name: (call(client, url, token, task_id), needs a fresh parked task for the owner)
    "SendMessage": (lambda c, u, t, tid: post(c, u, t, "SendMessage", _follow_up(tid)), True),
    "SendStreamingMessage": (
        lambda c, u, t, tid: post(c, u, t, "SendStreamingMessage", _follow_up(tid)), True),
    "GetTask": (lambda c, u, t, tid: post(c, u, t, "GetTask", {"id": tid}), False),
    "ListTasks": (lambda c, u, t, tid: post(c, u, t, "ListTasks", {}), False),
    "SubscribeToTask": (
        lambda c, u, t, tid: post(c, u, t, "SubscribeToTask", {"id": tid}), False),
    "CreateTaskPushNotificationConfig": (
        lambda c, u, t, tid: post(c, u, t, "CreateTaskPushNotificationConfig", {
            "taskId": tid, "id": "cfg2", "url": "http://127.0.0.1:9/hook"}), False),
    "GetTaskPushNotificationConfig": (
        lambda c, u, t, tid: post(c, u, t, "GetTaskPushNotificationConfig",
                                  {"taskId": tid, "id": "cfg"}), False),
    "ListTaskPushNotificationConfigs": (
        lambda c, u, t, tid: post(c, u, t, "ListTaskPushNotificationConfigs",
                                  {"taskId": tid}), False),
    "DeleteTaskPushNotificationConfig": (
        lambda c, u, t, tid: post(c, u, t, "DeleteTaskPushNotificationConfig",
                                  {"taskId": tid, "id": "cfg"}), False),
    "scoped_a2a/trajectory/read": (
        lambda c, u, t, tid: post(c, u, t, "scoped_a2a/trajectory/read",
                                  {"taskId": tid, "after": 0}), False),
    "scoped_a2a/push/deliveries": (
        lambda c, u, t, tid: post(c, u, t, "scoped_a2a/push/deliveries", {"taskId": tid}),
        False),
    "GetExtendedAgentCard": (lambda c, u, t, tid: post(c, u, t, "GetExtendedAgentCard", {}),
                             False),
    "CancelTask": (lambda c, u, t, tid: post(c, u, t, "CancelTask", {"id": tid}), True),
}

OTHER_OWNER_ANSWER: dict[str, Outcome] = {
    name: -32001 for name in METHODS
} | {"ListTasks": "ok", "GetExtendedAgentCard": "ok"}


@pytest.fixture
def keys(tmp_path: Path) -> tuple[SigningKey, Path]:
    key = SigningKey()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(key)))
    return key, path


async def test_every_method_against_every_credential(keys: tuple[SigningKey, Path]) -> None:
    key, path = keys
    stranger = SigningKey(kid=key.kid)  # same kid, another key pair
    alice, bob = key.token("alice"), key.token("bob")
    rows: dict[str, str | None] = {
        "no credential": None,
        "malformed": "Bearer not-a-jwt",
        "expired": key.token("alice", exp_in=-3600),
        "wrong audience": key.token("alice", aud="someone-else"),
        "wrong key": stranger.token("alice"),
        "alg none": unsigned_token("alice", key.kid),
        "HMAC confusion": hmac_confused_token("alice", key),
        "valid, other owner": bob,
        "valid, owner": alice,
    }
    app = jwt_app(path)
    results: dict[tuple[str, str], Outcome] = {}
    expected: dict[tuple[str, str], Outcome] = {}
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        shared = await park(client, url, alice)
        outcome, _ = await post(client, url, alice, "CreateTaskPushNotificationConfig", {
            "taskId": shared, "id": "cfg", "url": "http://127.0.0.1:9/hook"})
        assert outcome == "ok"
        for row, token in rows.items():
            for name, (call, fresh) in METHODS.items():
                task_id = shared
                if row == "valid, owner" and fresh:
                    task_id = await park(client, url, alice)
                outcome, result = await call(client, url, token, task_id)
                results[row, name] = outcome
                if row == "valid, owner":
                    expected[row, name] = "ok"
                elif row == "valid, other owner":
                    expected[row, name] = OTHER_OWNER_ANSWER[name]
                    if name == "ListTasks":
                        assert result["tasks"] == [], "bob sees alice's tasks"
                    if outcome == -32001:  # exactly the answer for an id that does not exist
                        _, unknown = await call(client, url, token, uuid.uuid4().hex)
                        assert result["message"] == unknown["message"].replace(
                            unknown["message"].split("'")[1], task_id)
                else:
                    expected[row, name] = "401"
                if row == "valid, owner" and name == "ListTasks":
                    assert shared in {t["id"] for t in result["tasks"]}
    out = os.environ.get("SCOPED_A2A_AUTH_MATRIX")
    if out:  # the table for the report: python -m pytest ... with this set to a file path
        lines = ["| method | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|"]
        lines += [f"| {m} | " + " | ".join(str(results[r, m]) for r in rows) + " |"
                  for m in METHODS]
        Path(out).write_text("\n".join(lines) + "\n")
    assert results == expected
    assert app.auth_failures == 7 * len(METHODS)
