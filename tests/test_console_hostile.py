"""The console against a hostile client, over real HTTP through hypercorn, on both backends:
sessions that must end (logout, a revoked key), feeds and sessions one principal may not pile
up, the cookie behind a TLS-ending proxy, and probes that must get a clear 4xx."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.protocol.errors import Unauthenticated
from scoped_a2a.protocol.principal import Principal
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth import api_keys as api_keys_module
from scoped_a2a.server.auth.api_keys import ApiKeys
from scoped_a2a.server.auth.bearer_jwt import JwtBearer
from scoped_a2a.server.console import ConsoleSettings, access, routes
from tests.auth_tokens import AUDIENCE, ISSUER, SigningKey, jwks
from tests.helpers import served, text_message
from tests.test_console_api import KEYS, WRITE, agent, held_run, key, sse

pytestmark = pytest.mark.anyio


def make_app(tmp_path: Path, **options: Any) -> A2AApp:
    keys = tmp_path / "keys"
    keys.write_text("".join(f"{who}:{k}\n" for who, k in KEYS.items()))
    return A2AApp(agent, authenticate=Authenticator([ApiKeys(keys)]),
                  console=ConsoleSettings(frozenset({"ops"})), **options)


async def login(client: httpx.AsyncClient, url: str, credential: str) -> dict[str, str]:
    r = await client.post(url + "console/api/login", json={"credential": credential},
                          headers={**WRITE, "Origin": url.rstrip("/")})
    assert r.status_code == 200, r.text
    return {"Cookie": r.headers["set-cookie"].split(";")[0]}


@asynccontextmanager
async def feed(client: httpx.AsyncClient, url: str, route: str,
               headers: dict[str, str]) -> AsyncIterator[AsyncIterator[tuple[str, Any]]]:
    async with client.stream("GET", url + "console/api/" + route, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        yield sse(r)


async def last_event(events: AsyncIterator[tuple[str, Any]]) -> str:
    """Read a feed to its end; the name of its last event."""
    name = ""
    async for event in events:
        name = event[0]
    return name


async def test_logout_ends_the_sessions_open_feeds_at_once(tmp_path: Path) -> None:
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient(timeout=10) as client:
        jar = await login(client, url, "alice-key")
        async with held_run(client, url, "alice") as task_id, \
                feed(client, url, "runs/stream", jar) as runs, \
                feed(client, url, f"tasks/{task_id}/timeline", jar) as timeline:
            assert (await anext(runs))[0] == "snapshot"
            assert (await anext(timeline))[0] == "reset"
            out = await client.post(url + "console/api/logout",
                                    headers={**jar, **WRITE, "Origin": url.rstrip("/")})
            assert out.status_code == 200
            with anyio.fail_after(2):  # not at the next change, nor 30 s later: now
                assert await last_event(runs) == "logout"
                assert await last_event(timeline) == "logout"


async def test_a_revoked_key_ends_feeds_and_sessions(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes, "RECHECK", 0.2)
    monkeypatch.setattr(api_keys_module, "CHECK_EVERY", 0.0)
    app = make_app(tmp_path)
    assert app.console is not None
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        jar = await login(client, url, "alice-key")
        async with held_run(client, url, "alice") as task_id, \
                feed(client, url, "runs/stream", key("alice")) as idle_runs, \
                feed(client, url, f"tasks/{task_id}/timeline", jar) as timeline:
            assert (await anext(idle_runs))[0] == "snapshot"
            (tmp_path / "keys").write_text("bob:bob-key\nops:ops-key\n")
            with anyio.fail_after(3):  # an idle feed too: nothing changes on the runs list
                assert await last_event(idle_runs) == "logout"
                assert await last_event(timeline) == "logout"
        assert (await client.get(url + "console/api/me", headers=jar)).status_code == 401
        # The refused session no longer keeps the credential in memory.
        assert len(app.console.access.sessions) == 0
        # Logging out of a dead session still clears the browser's cookie.
        out = await client.post(url + "console/api/logout",
                                headers={**jar, **WRITE, "Origin": url.rstrip("/")})
        assert out.status_code == 200 and "Max-Age=0" in out.headers["set-cookie"]


async def test_feeds_per_principal_are_capped(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes, "MAX_FEEDS", 3)
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient(timeout=10) as client:
        async with feed(client, url, "runs/stream", key("alice")) as one, \
                feed(client, url, "runs/stream", key("alice")) as two, \
                feed(client, url, "runs/stream", key("alice")) as three:
            for events in (one, two, three):
                assert (await anext(events))[0] == "snapshot"
            r = await client.get(url + "console/api/runs/stream", headers=key("alice"))
            assert r.status_code == 429 and "feeds" in r.json()["error"]
            assert r.headers["content-security-policy"].startswith("default-src 'none'")
            # Another principal is not affected by alice's feeds.
            async with feed(client, url, "runs/stream", key("bob")) as bobs:
                assert (await anext(bobs))[0] == "snapshot"
        with anyio.fail_after(3):  # once her feeds hang up she may open one again
            while True:
                async with client.stream("GET", url + "console/api/runs/stream",
                                         headers=key("alice")) as r:
                    if r.status_code == 200:
                        break
                await anyio.sleep(0.02)


async def test_logging_in_again_and_again_keeps_other_principals_sessions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access, "MAX_SESSIONS", 40)
    monkeypatch.setattr(access, "SESSIONS_PER_PRINCIPAL", 4)
    app = make_app(tmp_path)
    assert app.console is not None
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        ops = await login(client, url, "ops-key")
        first = await login(client, url, "alice-key")
        for _ in range(60):
            latest = await login(client, url, "alice-key")
        assert (await client.get(url + "console/api/me", headers=ops)).status_code == 200
        assert (await client.get(url + "console/api/me", headers=latest)).status_code == 200
        assert (await client.get(url + "console/api/me", headers=first)).status_code == 401
        assert len(app.console.access.sessions) == 5
        # Wrong credentials leave nothing behind.
        for _ in range(50):
            r = await client.post(url + "console/api/login", json={"credential": "guess"},
                                  headers={**WRITE, "Origin": url.rstrip("/")})
            assert r.status_code == 401
        assert len(app.console.access.sessions) == 5


async def test_the_cookie_is_secure_behind_a_tls_ending_proxy(tmp_path: Path) -> None:
    app = make_app(tmp_path, public_url="https://agent.example/")
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        r = await client.post(url + "console/api/login", json={"credential": "alice-key"},
                              headers={**WRITE, "Origin": "https://agent.example"})
        assert r.status_code == 200
        assert "; Secure" in r.headers["set-cookie"]


async def test_hostile_probes_get_a_clear_4xx(tmp_path: Path) -> None:
    origin = {"Origin": ""}
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient(timeout=10) as client:
        origin["Origin"] = url.rstrip("/")
        api = url + "console/api/"
        async with held_run(client, url, "bob") as theirs:
            # Another owner's task, however its id is spelt: not found, never a 500.
            for route in (f"tasks/{theirs}", f"tasks/{theirs}/timeline",
                          f"tasks/{theirs}%2Ftimeline", f"tasks/%2e%2e/{theirs}",
                          f"tasks/{theirs.upper()}", f"tasks/{theirs}%00", "tasks/%0d%0a",
                          "tasks/" + "9" * 8000, "tasks/%ff%fe/timeline", "tasks//timeline"):
                r = await client.get(api + route, headers=key("alice"))
                assert r.status_code == 404, (route, r.status_code)
                assert "error" in r.json() and "x-frame-options" in r.headers
            r = await client.post(api + f"tasks/{theirs}/cancel",
                                  headers={**key("alice"), **WRITE, **origin})
            assert r.status_code == 404
            runs = (await client.get(api + "runs?owner=bob", headers=key("alice"))).json()
            assert runs["live"] == [] and runs["ended"] == []
        # Malformed queries.
        for query in ("limit=abc", "limit=1e9", "limit=" + "9" * 5000, "limit=%00"):
            r = await client.get(api + "runs?" + query, headers=key("alice"))
            assert r.status_code == 400, query
        for query in ("reason=%ff%fe", "owner=" + "x" * 20000, "%zz=1", "a=%", "limit=1&limit=2"):
            r = await client.get(api + "runs?" + query, headers=key("alice"))
            assert r.status_code == 200, query
        # Writes from elsewhere: no header, a null or foreign Origin, a cross-site fetch, a
        # form post, and a login's credential given as a form field.
        jar = await login(client, url, "alice-key")
        cancel = api + "tasks/x/cancel"
        for headers in ({**jar, **origin}, {**jar, **WRITE, "Origin": "null"},
                        {**jar, **WRITE, "Origin": "http://127.0.0.1.evil.example"},
                        {**jar, **WRITE, **origin, "Sec-Fetch-Site": "same-site"},
                        {**jar, **WRITE}):
            assert (await client.post(cancel, headers=headers)).status_code == 403
            assert (await client.post(api + "logout", headers=headers)).status_code == 403
        r = await client.post(api + "login", data={"credential": "alice-key"},
                              headers={**WRITE, **origin})
        assert r.status_code == 400 and "set-cookie" not in r.headers
        r = await client.post(api + "login", headers={**WRITE, **origin},
                              json={"credential": "alice-key\r\nX-API-Key: ops-key"})
        assert r.status_code == 401 and "set-cookie" not in r.headers
        # A planted cookie is never adopted: login issues a fresh token.
        r = await client.post(api + "login", json={"credential": "alice-key"},
                              headers={**WRITE, **origin, "Cookie": "scoped_a2a_console=fixed"})
        assert "scoped_a2a_console=fixed" not in r.headers["set-cookie"]


async def test_only_the_configured_scope_claim_makes_an_operator(tmp_path: Path) -> None:
    signing = SigningKey()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(signing)))
    bearer = JwtBearer(str(tmp_path / "jwks.json"), issuer=ISSUER, audience=AUDIENCE,
                       tenants_claim="tenants")
    app = A2AApp(agent, authenticate=Authenticator([bearer]),
                 console=ConsoleSettings(frozenset({"ops"}), "console:ops"))
    tokens = {
        "spoof-roles": (signing.token("mallory", roles=["console:ops"]), False),
        "spoof-prefix": (signing.token("mallory", scope="console:ops-not"), False),
        "spoof-tenant": (signing.token("ops\x1facme"), None),
        "scope": (signing.token("carol", scope="read console:ops"), True),
        "scp": (signing.token("carol", scp=["console:ops"]), True),
        "expired": (signing.token("ops", exp_in=-3600), None),
    }
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        for name, (token, operator) in tokens.items():
            r = await client.get(url + "console/api/me",
                                 headers={"Authorization": f"Bearer {token}"})
            if operator is None:
                assert r.status_code == 401, name
                r = await client.post(url + "console/api/login", json={"credential": token},
                                      headers={**WRITE, "Origin": url.rstrip("/")})
                assert r.status_code == 401 and "set-cookie" not in r.headers, name
            else:
                assert r.json()["operator"] is operator, name




def test_the_page_writes_text_only_under_a_strict_policy() -> None:
    folder = resources.files("scoped_a2a.server.console").joinpath("static")
    sinks = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|"
                       r"new Function|setTimeout\(\s*[\"'`]|\.on[a-z]+\s*=|javascript:")
    for item in folder.iterdir():
        if item.name.endswith((".js", ".html")):
            text = item.read_text()
            assert not sinks.search(text), item.name
            assert "<script>" not in text and "style=" not in text, item.name
    policy = routes.SECURITY_HEADERS[0][1].decode()
    for directive in ("default-src 'none'", "object-src 'none'", "base-uri 'none'",
                      "frame-ancestors 'none'", "require-trusted-types-for 'script'"):
        assert directive in policy
    assert "unsafe-" not in policy


async def test_an_operator_by_name_sees_only_the_tenants_it_may_use(tmp_path: Path) -> None:
    """A multi-tenant issuer may give each tenant its own "ops": the one limited to t1 must
    not become an operator of t2 (a principal named like the operator, another tenant)."""
    signing = SigningKey()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(signing)))
    bearer = JwtBearer(str(tmp_path / "jwks.json"), issuer=ISSUER, audience=AUDIENCE,
                       tenants_claim="tenants")
    app = A2AApp(agent, authenticate=Authenticator([bearer]),
                 console=ConsoleSettings(frozenset({"ops"})))
    bob = {"Authorization": "Bearer " + signing.token("bob", tenants=["t1", "t2"]),
           "A2A-Version": "1.0"}
    ops_t1 = {"Authorization": "Bearer " + signing.token("ops", tenants=["t1"])}
    ops_all = {"Authorization": "Bearer " + signing.token("ops")}

    @asynccontextmanager
    async def run_in(client: httpx.AsyncClient, url: str, tenant: str) -> AsyncIterator[str]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": text_message("work"), "tenant": tenant}}
        async with client.stream("POST", url, json=body, headers=bob) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    yield json.loads(line[5:])["result"]["task"]["id"]
                    return

    app_all = A2AApp(agent, authenticate=Authenticator([JwtBearer(
        str(tmp_path / "jwks.json"), issuer=ISSUER, audience=AUDIENCE)]),
        console=ConsoleSettings(frozenset({"ops"})))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client, \
            run_in(client, url, "t1") as in_t1, run_in(client, url, "t2") as in_t2:
        runs = (await client.get(url + "console/api/runs", headers=ops_t1)).json()
        assert [r["taskId"] for r in runs["live"]] == [in_t1]
        for route in (f"tasks/{in_t2}", f"tasks/{in_t2}/timeline"):
            r = await client.get(url + "console/api/" + route, headers=ops_t1)
            assert r.status_code == 404
        r = await client.post(url + f"console/api/tasks/{in_t2}/cancel",
                              headers={**ops_t1, **WRITE})
        assert r.status_code == 404
        assert (await client.get(url + f"console/api/tasks/{in_t1}",
                                 headers=ops_t1)).status_code == 200
    async with served(app_all) as url, httpx.AsyncClient(timeout=10) as client:
        # Without a tenants claim in use, the operator sees every tenant.
        bob = {**bob, "Authorization": "Bearer " + signing.token("bob")}
        async with run_in(client, url, "t1") as in_t1, run_in(client, url, "t2") as in_t2:
            runs = (await client.get(url + "console/api/runs", headers=ops_all)).json()
            assert {r["taskId"] for r in runs["live"]} == {in_t1, in_t2}


async def test_without_authentication_a_dns_name_host_is_refused() -> None:
    """DNS rebinding: a page at http://evil.example:PORT whose name now points at 127.0.0.1 is
    same-origin with the console in the browser's eyes (its Origin matches its Host). Without
    authentication every caller is an operator, so such a page could read every run and cancel
    them: the console refuses a Host that is neither an IP address nor localhost."""
    app = A2AApp(agent, console=ConsoleSettings())
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        port = url.rstrip("/").rsplit(":", 1)[1]
        evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        for method, route in (("GET", "console"), ("GET", "console/api/runs"),
                              ("GET", "console/api/runs/stream"),
                              ("POST", "console/api/tasks/x/cancel")):
            r = await client.request(method, url + route, headers={**evil, **WRITE})
            assert r.status_code == 403 and "Host" in r.json()["error"], route
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            r = await client.get(url + "console/api/runs", headers={"Host": host})
            assert r.status_code == 200, host


async def test_an_authenticator_outage_does_not_end_feeds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A JWKS endpoint down is not a revoked credential: feeds stay open across it, and the
    re-checks do not spin (a session that ended meanwhile waits for the next re-check)."""
    monkeypatch.setattr(routes, "RECHECK", 0.05)
    down = False
    calls = 0

    async def authenticate(scope: Any) -> Principal:
        nonlocal calls
        calls += 1
        if down:
            raise RuntimeError("the issuer is unreachable")
        if dict(scope["headers"]).get(b"authorization") == b"Bearer alice-key":
            return Principal("alice")
        raise Unauthenticated("no")

    app = A2AApp(agent, authenticate=authenticate, console=ConsoleSettings())
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        jar = await login(client, url, "alice-key")
        both = {**jar, "Authorization": "Bearer alice-key"}
        async with feed(client, url, "runs/stream", both) as runs:
            assert (await anext(runs))[0] == "snapshot"
            down = True
            await client.post(url + "console/api/logout",
                              headers={**jar, **WRITE, "Origin": url.rstrip("/")})
            calls = 0
            with anyio.move_on_after(0.5):
                assert await last_event(runs) == "never"  # nothing ends it
            assert calls < 30  # re-checks every 0.05 s, not a tight loop
            down = False
