"""Authentication and ownership beyond the matrix: 0.3 names, the card, API keys (reload,
constant-time compare, SIGHUP), JWKS rotation from a URL, 403, ctx.principal, the a2a-sdk client.

Everything goes through real HTTP to hypercorn, on asyncio and on trio.
"""

from __future__ import annotations

import hmac
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth import api_keys as api_keys_module
from scoped_a2a.server.auth.api_keys import ApiKeys, hash_token
from scoped_a2a.server.auth.bearer_jwt import JwksKeys, JwtBearer

from .auth_tokens import AUDIENCE, ISSUER, SigningKey, jwks
from .helpers import served, text_message
from .test_auth_matrix import asking_agent, jwt_app, park, post

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text(f"# test keys\nalice:sha256:{hash_token('alice-secret')}\n"
                    "bob:bob-secret\n")
    return path


def keys_app(path: Path) -> A2AApp:
    return A2AApp(asking_agent, authenticate=Authenticator([ApiKeys(path)]), grace=1.0)


async def test_v03_names_cannot_reach_another_owners_task(tmp_path: Path) -> None:
    key = SigningKey()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(key)))
    alice, bob = key.token("alice"), key.token("bob")
    async with served(jwt_app(tmp_path / "jwks.json")) as url, httpx.AsyncClient(
            timeout=20) as client:
        task_id = await park(client, url, alice, version="0.3")
        ok, _ = await post(client, url, alice, "tasks/pushNotificationConfig/set", {
            "taskId": task_id,
            "pushNotificationConfig": {"id": "cfg", "url": "http://127.0.0.1:9/hook"}},
            version=None)
        assert ok == "ok"
        follow = {"message": text_message("yes", v1=False, taskId=task_id)}
        probes: list[tuple[str, dict[str, Any]]] = [
            ("message/send", follow),
            ("message/stream", follow),
            ("tasks/get", {"id": task_id}),
            ("tasks/resubscribe", {"id": task_id}),
            ("tasks/pushNotificationConfig/set", {
                "taskId": task_id,
                "pushNotificationConfig": {"id": "x", "url": "http://127.0.0.1:9/hook"}}),
            ("tasks/pushNotificationConfig/get",
             {"id": task_id, "pushNotificationConfigId": "cfg"}),
            ("tasks/pushNotificationConfig/list", {"id": task_id}),
            ("tasks/pushNotificationConfig/delete",
             {"id": task_id, "pushNotificationConfigId": "cfg"}),
            ("tasks/cancel", {"id": task_id}),
        ]
        for method, params in probes:
            outcome, err = await post(client, url, bob, method, params, version=None)
            assert outcome == -32001, (method, err)
            assert "data" not in err  # 0.3 errors carry no ErrorInfo list
        # Still alice's, untouched: she answers it, and the agent saw her as the caller.
        outcome, task = await post(client, url, alice, "message/send", follow, version=None)
        assert outcome == "ok"
        assert task["status"]["state"] == "completed"
        assert task["status"]["message"]["parts"][0]["text"] == "alice said yes"


async def test_card_declares_the_schemes_and_stays_public(tmp_path: Path,
                                                          key_file: Path) -> None:
    key = SigningKey()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(key)))
    auth = Authenticator([ApiKeys(key_file), JwtBearer(str(tmp_path / "jwks.json"))])
    app = A2AApp(asking_agent, authenticate=auth, extended_card={"description": "more"})
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        r = await client.get(url + ".well-known/agent-card.json")
        assert r.status_code == 200
        card = r.json()
        assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"] == {
            "location": "header", "name": "X-API-Key", "description": card[
                "securitySchemes"]["apiKey"]["description"]}
        assert card["securitySchemes"]["apiKey"]["type"] == "apiKey"  # the 0.3 shape
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        assert card["securitySchemes"]["bearer"]["type"] == "http"
        assert card["securityRequirements"] == [{"schemes": {"apiKey": {"list": []}}},
                                                {"schemes": {"bearer": {"list": []}}}]
        assert card["security"] == [{"apiKey": []}, {"bearer": []}]
        # The extended card needs a credential; every other path too (no routing hints).
        outcome, _ = await post(client, url, None, "GetExtendedAgentCard", {})
        assert outcome == "401"
        for path in ("nope", ""):
            assert (await client.get(url + path)).status_code == 401
        outcome, extended = await post(client, url, key.token("carol", aud="x", iss="y"),
                                       "GetExtendedAgentCard", {})
        assert outcome == "ok"
        assert extended["description"] == "more"
        # The official SDK reads the card (1.0 parser ignores the 0.3 keys, and vice versa).
        from a2a.client.card_resolver import parse_agent_card

        parsed = parse_agent_card(card)
        assert parsed.security_schemes["bearer"].http_auth_security_scheme.bearer_format == "JWT"
        assert parsed.security_requirements[0].schemes["apiKey"] is not None


async def test_api_keys_header_and_bearer_and_403(key_file: Path, tmp_path: Path) -> None:
    key = SigningKey()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(key)))
    scoped = JwtBearer(str(tmp_path / "jwks.json"), issuer=ISSUER, audience=AUDIENCE,
                       required_scopes=["a2a:call"])
    app = A2AApp(asking_agent, authenticate=Authenticator([ApiKeys(key_file), scoped]))
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": text_message("hi")}}
        r = await client.post(url, json=body, headers={"X-API-Key": "alice-secret",
                                                        "A2A-Version": "1.0"})
        assert r.json()["result"]["task"]["status"]["message"]["parts"][0]["text"] == \
            "hello alice"
        outcome, task = await post(client, url, "bob-secret", "SendMessage", body["params"])
        assert task["task"]["status"]["message"]["parts"][0]["text"] == "hello bob"
        r = await client.post(url, json=body, headers={"X-API-Key": "alice-secret-not"})
        assert r.status_code == 401
        # A JWT that verifies but lacks the scope: 403, no WWW-Authenticate, fixed words.
        r = await client.post(url, json=body, headers={
            "Authorization": f"Bearer {key.token('dave')}", "A2A-Version": "1.0"})
        assert r.status_code == 403
        assert "www-authenticate" not in r.headers
        assert r.json()["error"]["code"] == -32043
        assert "scope" not in r.json()["error"]["message"]
        outcome, task = await post(client, url, key.token("dave", scope="a2a:call other"),
                                   "SendMessage", body["params"])
        assert outcome == "ok"
    assert app.auth_failures == 2


async def test_api_keys_compared_in_constant_time(key_file: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(api_keys_module.hmac, "compare_digest", spy)
    async with served(keys_app(key_file)) as url, httpx.AsyncClient(timeout=20) as client:
        outcome, _ = await post(client, url, "bob-secret", "ListTasks", {})
        assert outcome == "ok"
        # Every stored key was compared, with compare_digest, on the hash of what was sent.
        assert len(compared) == 2
        assert all(a == bytes.fromhex(hash_token("bob-secret")) for a, _ in compared)
        compared.clear()
        outcome, _ = await post(client, url, "wrong", "ListTasks", {})
        assert outcome == "401"
        assert len(compared) == 2


async def test_key_file_reload_on_change(key_file: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_keys_module, "CHECK_EVERY", 0.0)
    auth = Authenticator([ApiKeys(key_file)])
    async with served(A2AApp(asking_agent, authenticate=auth)) as url, httpx.AsyncClient(
            timeout=20) as client:
        assert (await post(client, url, "bob-secret", "ListTasks", {}))[0] == "ok"
        key_file.write_text("bob:bob-rotated\n")
        st = key_file.stat()
        os.utime(key_file, (st.st_atime, st.st_mtime + 5))  # a coarse mtime may not move
        assert (await post(client, url, "bob-secret", "ListTasks", {}))[0] == "401"
        assert (await post(client, url, "bob-rotated", "ListTasks", {}))[0] == "ok"
        # A broken file keeps the keys in use (a half-written file locks nobody out).
        key_file.write_text("no separator here\n")
        os.utime(key_file, (st.st_atime, st.st_mtime + 10))
        assert (await post(client, url, "bob-rotated", "ListTasks", {}))[0] == "ok"


def test_sighup_reloads_the_key_file_of_serve(key_file: Path, tmp_path: Path) -> None:
    """``serve --api-keys`` re-reads the file on SIGHUP (mtime checks are once a second; the
    signal is immediate). A real process, since the signal goes to it."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--api-keys",
             str(key_file), "--log-level", "INFO"], stdout=out, stderr=out, env=env)
    try:
        url = _wait_for(log, "serving on ")
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        hdr = {"A2A-Version": "1.0"}
        with httpx.Client(timeout=10) as client:
            ok = client.post(url, json=body, headers={**hdr, "X-API-Key": "bob-secret"})
            assert ok.status_code == 200
            assert client.post(url, json=body).status_code == 401
            key_file.write_text("carol:carol-secret\n")
            proc.send_signal(signal.SIGHUP)
            _wait_for(log, "API keys reloaded")
            assert client.post(url, json=body, headers={**hdr, "X-API-Key": "carol-secret"}
                               ).status_code == 200
            assert client.post(url, json=body, headers={**hdr, "X-API-Key": "bob-secret"}
                               ).status_code == 401
        assert "bob-secret" not in log.read_text() and "carol-secret" not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(20)


def _wait_for(log: Path, text: str, timeout: float = 20.0) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if text in line:
                return line.split(text, 1)[1].split()[0] if text == "serving on " else line
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the log:\n{log.read_text(errors='replace')}")


class JwksServer:
    """A tiny ASGI app serving ``doc`` as the JWKS (with the lifespan hypercorn's trio worker
    needs); counts requests."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.requests = 0
        self.ready = anyio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self.ready.set()
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        self.requests += 1
        body = json.dumps(self.doc).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


async def test_jwks_url_rotation_and_bounded_refresh() -> None:
    old, new = SigningKey(), SigningKey()
    jwks_app = JwksServer(jwks(old))
    async with served(jwks_app) as jwks_url:  # type: ignore[arg-type]
        keys = JwksKeys(jwks_url, refresh_interval=0.5)
        app = A2AApp(asking_agent, authenticate=Authenticator([
            JwtBearer(keys, issuer=ISSUER, audience=AUDIENCE)]))
        async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
            assert (await post(client, url, old.token("alice"), "ListTasks", {}))[0] == "ok"
            assert jwks_app.requests == 1
            # Made-up kids in a burst: at most one fetch per refresh interval.
            for i in range(10):
                bogus = old.token("alice", kid=f"bogus-{i}")
                assert (await post(client, url, bogus, "ListTasks", {}))[0] == "401"
            assert jwks_app.requests <= 2
            # The issuer rotates: the new kid is unknown, fetched (once the interval is up).
            jwks_app.doc = jwks(new)
            await anyio.sleep(0.6)
            before = jwks_app.requests
            assert (await post(client, url, new.token("alice"), "ListTasks", {}))[0] == "ok"
            assert jwks_app.requests == before + 1
            # Cached now: no fetch per request; the retired key no longer verifies.
            assert (await post(client, url, new.token("alice"), "ListTasks", {}))[0] == "ok"
            assert jwks_app.requests == before + 1
            assert (await post(client, url, old.token("alice"), "ListTasks", {}))[0] == "401"


async def test_a2a_sdk_client_with_an_auth_interceptor(key_file: Path) -> None:
    from a2a.client import ClientConfig, ClientFactory
    from a2a.client.auth import AuthInterceptor, CredentialService
    from a2a.client.card_resolver import A2ACardResolver
    from a2a.types import Message, Part, Role, SendMessageRequest

    class Keys(CredentialService):
        async def get_credentials(self, security_scheme_name: str, context: Any) -> str | None:
            return "alice-secret" if security_scheme_name == "apiKey" else None

    async with served(keys_app(key_file)) as url, httpx.AsyncClient(timeout=20) as h:
        card = await A2ACardResolver(h, url.rstrip("/")).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=h)).create(
            card, interceptors=[AuthInterceptor(Keys())])
        msg = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="hi")])
        replies = [r async for r in client.send_message(SendMessageRequest(message=msg))]
        task = replies[-1].task
        assert task.status.message.parts[0].text == "hello alice"
        # Without the interceptor the same client is refused.
        bare = ClientFactory(ClientConfig(streaming=False, httpx_client=h)).create(card)
        with pytest.raises(Exception) as refused:
            _ = [r async for r in bare.send_message(SendMessageRequest(message=msg))]
        assert "401" in str(refused.value) or "authentication" in str(refused.value).lower()


async def test_jwks_file_rotation_and_the_verified_token_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scoped_a2a.server.auth import bearer_jwt

    monkeypatch.setattr(bearer_jwt, "CHECK_EVERY", 0.0)
    old, new = SigningKey(), SigningKey()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(old)))
    bearer = JwtBearer(str(path), issuer=ISSUER, audience=AUDIENCE, leeway=0)
    app = A2AApp(asking_agent, authenticate=Authenticator([bearer]))
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        token = old.token("alice")
        for _ in range(3):
            assert (await post(client, url, token, "ListTasks", {}))[0] == "ok"
        assert token in bearer._verified  # checked once, then served from the cache
        # Rotation: the old key leaves the file; its tokens stop working at once, cached or not.
        path.write_text(json.dumps(jwks(new)))
        st = path.stat()
        os.utime(path, (st.st_atime, st.st_mtime + 5))
        assert (await post(client, url, token, "ListTasks", {}))[0] == "401"
        assert (await post(client, url, new.token("alice"), "ListTasks", {}))[0] == "ok"
        # A cached token still expires on time. (exp is whole seconds from a truncated now, so
        # a token "valid for 2 s" may have just over 1 s left when it is made.)
        short = new.token("alice", exp_in=2)
        assert (await post(client, url, short, "ListTasks", {}))[0] == "ok"
        await anyio.sleep(2.1)
        assert (await post(client, url, short, "ListTasks", {}))[0] == "401"


async def test_a_custom_hook_and_its_failures(caplog: pytest.LogCaptureFixture) -> None:
    """Any ``async (scope) -> Principal`` is a hook; its bug is a 503 with an error id (never
    its text), an empty principal id is a 401, and it sees every request but the card."""
    from scoped_a2a import Principal
    from scoped_a2a.protocol.errors import Unauthenticated

    seen: list[str] = []

    async def hook(scope: dict[str, Any]) -> Principal:
        seen.append(scope["path"])
        who = dict(scope["headers"]).get(b"x-who", b"").decode()
        if who == "crash":
            raise RuntimeError("db password is hunter2")
        if who == "nobody":
            return Principal("")
        if not who:
            raise Unauthenticated("no x-who header")
        return Principal(who, {"via": "hook"})

    app = A2AApp(asking_agent, authenticate=hook)
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        assert (await client.get(url + ".well-known/agent-card.json")).status_code == 200
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": text_message("hi")}}
        hdr = {"A2A-Version": "1.0"}
        r = await client.post(url, json=body, headers={**hdr, "X-Who": "crash"})
        assert r.status_code == 503
        assert "hunter2" not in r.text and "error id" in r.json()["error"]["message"]
        r = await client.post(url, json=body, headers={**hdr, "X-Who": "nobody"})
        assert r.status_code == 401
        r = await client.post(url, json=body, headers={**hdr, "X-Who": "zoe"})
        assert r.json()["result"]["task"]["status"]["message"]["parts"][0]["text"] == \
            "hello zoe"
        assert (await client.post(url, json=body, headers=hdr)).status_code == 401
    assert seen == ["/"] * 4  # once per request; never for the card
    assert "hunter2" in caplog.text  # the traceback is in the log, with an id


async def test_an_unusable_credential_leaves_nothing_to_the_cycle_collector() -> None:
    """The refusal keeps what the caller may see of an unusable credential, not the exception:
    on Python 3.12+ a kept exception's traceback and the authenticator's frame form a cycle
    that holds the request's scope until the cyclic collector runs (docs/design.md). With the
    collector off, the refusal must leave no frame of it behind (fails without, 3.11 too)."""
    import gc
    from types import FrameType

    from scoped_a2a.server.auth import CredentialUnusable

    class Unusable:
        name, challenge = "unusable", 'Bearer realm="a2a"'

        async def authenticate(self, scope: dict[str, Any]) -> None:
            raise CredentialUnusable("no commonName in the certificate",
                                     public="the client certificate names no caller")

        def card_scheme(self) -> dict[str, Any]:
            return {}

    auth = Authenticator([Unusable()])  # type: ignore[list-item]
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with pytest.raises(CredentialUnusable) as refused:
            await auth({"type": "http", "headers": []})
        refused_public = refused.value.public
        del refused
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, FrameType)
                and o.f_code.co_name == "authenticate"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert refused_public == "the client certificate names no caller"
    assert left == [], f"left to the cycle collector: {left[:5]}"
