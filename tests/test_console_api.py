"""The console's JSON + SSE API over real HTTP through hypercorn, on both backends: off by
default, credentials, owner scoping, the operator, CSRF refusals, the CSP, live streams."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys
from scoped_a2a.server.console import ConsoleSettings
from tests.helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio

KEYS = {"alice": "alice-key", "bob": "bob-key", "ops": "ops-key"}
WRITE = {"X-Console-Request": "1"}


async def agent(ctx: RunContext) -> str:
    if ctx.text.startswith("quick"):
        return "done"
    if ctx.text == "ask":
        await ctx.ask("what next?")
        await anyio.sleep(0.5)
        return "answered"
    for i in range(600):
        await ctx.trajectory({"tick": i})
        await anyio.sleep(0.05)
    return "long done"


def key(who: str) -> dict[str, str]:
    return {"X-API-Key": KEYS[who]}


def make_app(tmp_path: Path, *, console: bool = True) -> A2AApp:
    keys = tmp_path / "keys"
    keys.write_text("".join(f"{who}:{k}\n" for who, k in KEYS.items()))
    return A2AApp(agent, authenticate=Authenticator([ApiKeys(keys)]),
                  console=ConsoleSettings(frozenset({"ops"})) if console else None)


@asynccontextmanager
async def held_run(client: httpx.AsyncClient, url: str, who: str,
                   text: str = "work") -> AsyncIterator[str]:
    """A streaming send held open for the body; leaving it hangs up. Yields the task id."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": text_message(text)}}
    async with client.stream("POST", url, json=body,
                             headers={**key(who), "A2A-Version": "1.0"}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                yield json.loads(line[5:])["result"]["task"]["id"]
                return


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    name, data = "message", []
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            yield name, json.loads("\n".join(data))
            name, data = "message", []


async def test_console_is_off_by_default(tmp_path: Path) -> None:
    app = make_app(tmp_path, console=False)
    assert app.console is None and app.runner.watch is None
    async with served(app) as url, httpx.AsyncClient() as client:
        r = await client.get(url + "console", headers=key("ops"))
        assert r.status_code == 404


async def test_credentials_and_security_headers(tmp_path: Path) -> None:
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient() as client:
        page = await client.get(url + "console")
        assert page.status_code == 401
        assert 'id="login"' in page.text and "live-body" not in page.text
        assert (await client.get(url + "console/api/runs")).status_code == 401
        assert (await client.get(url + "console", headers={"X-API-Key": "nope"})).status_code \
            == 401
        ok = await client.get(url + "console", headers=key("alice"))
        assert ok.status_code == 200 and "live-body" in ok.text
        for r in (page, ok, await client.get(url + "console/static/console.js"),
                  await client.get(url + "console/api/me", headers=key("alice"))):
            csp = r.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "style-src 'self'" in csp
            assert "unsafe-inline" not in csp and "default-src 'none'" in csp
            assert r.headers["x-content-type-options"] == "nosniff"
        js = await client.get(url + "console/static/console.js")
        assert js.headers["content-type"].startswith("text/javascript")
        assert (await client.get(url + "console/static/../app.py")).status_code == 404
        me = (await client.get(url + "console/api/me", headers=key("ops"))).json()
        assert me == {"principal": "ops", "operator": True, "authentication": True}


async def test_login_session_and_cross_site_writes(tmp_path: Path) -> None:
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient() as client:
        origin = {"Origin": url.rstrip("/")}
        login = url + "console/api/login"
        cred = {"credential": "alice-key"}
        # No custom header (a cross-site form), a foreign Origin, a cross-site fetch: refused.
        assert (await client.post(login, json=cred, headers=origin)).status_code == 403
        evil = {**WRITE, "Origin": "https://evil.example"}
        assert (await client.post(login, json=cred, headers=evil)).status_code == 403
        cross = {**WRITE, **origin, "Sec-Fetch-Site": "cross-site"}
        assert (await client.post(login, json=cred, headers=cross)).status_code == 403
        bad = await client.post(login, json={"credential": "nope"}, headers={**WRITE, **origin})
        assert bad.status_code == 401 and "set-cookie" not in bad.headers
        r = await client.post(login, json=cred, headers={**WRITE, **origin})
        assert r.status_code == 200 and r.json()["principal"] == "alice"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
        token = cookie.split(";")[0]
        jar = {"Cookie": token}
        assert (await client.get(url + "console", headers=jar)).status_code == 200
        assert (await client.get(url + "console/api/me", headers=jar)).json()["principal"] \
            == "alice"
        # A write with the session cookie but without the header, or without an Origin.
        cancel = url + "console/api/tasks/x/cancel"
        assert (await client.post(cancel, headers={**jar, **origin})).status_code == 403
        assert (await client.post(cancel, headers={**jar, **WRITE})).status_code == 403
        assert (await client.post(cancel, headers={**jar, **WRITE, **origin})).status_code \
            == 404
        out = await client.post(url + "console/api/logout", headers={**jar, **WRITE, **origin})
        assert out.status_code == 200 and "Max-Age=0" in out.headers["set-cookie"]
        assert (await client.get(url + "console/api/me", headers=jar)).status_code == 401


async def test_owners_see_their_own_runs_and_operators_cancel(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with served(app) as url, httpx.AsyncClient() as client:
        async with held_run(client, url, "alice") as mine, held_run(client, url, "bob") as theirs:
            runs = (await client.get(url + "console/api/runs", headers=key("alice"))).json()
            assert [r["taskId"] for r in runs["live"]] == [mine]
            assert runs["live"][0]["holders"] == {"send": 0, "stream": 1, "subscribe": 0}
            assert runs["live"][0]["owner"] == "alice"
            everyone = (await client.get(url + "console/api/runs", headers=key("ops"))).json()
            assert {r["taskId"] for r in everyone["live"]} == {mine, theirs}
            for route in (f"tasks/{theirs}", f"tasks/{theirs}/timeline"):
                r = await client.get(url + "console/api/" + route, headers=key("alice"))
                assert r.status_code == 404
            r = await client.post(url + f"console/api/tasks/{theirs}/cancel",
                                  headers={**key("alice"), **WRITE})
            assert r.status_code == 404
            r = await client.post(url + f"console/api/tasks/{mine}/cancel",
                                  headers={**key("ops"), **WRITE})
            assert r.status_code == 200 and r.json()["state"] == "TASK_STATE_CANCELED"
        task = (await rpc(client, url, "GetTask", {"id": mine}, headers=key("alice")))["result"]
        assert task["status"]["message"]["parts"][0]["text"].endswith("(by ops)")
        with anyio.fail_after(5):
            while True:  # bob's stream just hung up: its end is being recorded
                ended = (await client.get(url + "console/api/runs?owner=bob",
                                          headers=key("ops"))).json()["ended"]
                if ended:
                    break
                await anyio.sleep(0.02)
        assert [(r["taskId"], r["reason"]) for r in ended] == [(theirs, "hang-up")]
        mine_ended = (await client.get(url + "console/api/runs?reason=CancelTask",
                                       headers=key("alice"))).json()["ended"]
        assert [(r["taskId"], r["canceledBy"]) for r in mine_ended] == [(mine, "ops")]
        counts = (await client.get(url + "console/api/runs", headers=key("alice"))).json()
        assert counts["counts"][-1]["reasons"] == {"CancelTask": 1}  # bob's hang-up: not hers


async def test_a_cancel_task_over_a2a_records_who_asked(tmp_path: Path) -> None:
    """A2A CancelTask keeps its caller with the end, as the console's cancel keeps its user:
    the operator sees who ended a run whichever way it was asked."""
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient(timeout=10) as client:
        async with held_run(client, url, "alice") as task_id:
            done = (await rpc(client, url, "CancelTask", {"id": task_id},
                              headers=key("alice")))["result"]["status"]["message"]
        assert done["parts"][0]["text"] == "Canceled: canceled by CancelTask (by alice)"
        ended = (await client.get(url + "console/api/runs?reason=CancelTask",
                                  headers=key("ops"))).json()["ended"]
        assert [(r["taskId"], r["canceledBy"]) for r in ended] == [(task_id, "alice")]


async def test_streams_show_a_new_run_its_timeline_and_its_hang_up(tmp_path: Path) -> None:
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient(timeout=10) as client:
        async with client.stream("GET", url + "console/api/runs/stream",
                                 headers=key("alice")) as runs:
            events = sse(runs)
            name, first = await anext(events)
            assert name == "snapshot" and first["live"] == []
            started = time.monotonic()
            async with held_run(client, url, "alice", "<b>bold</b>") as task_id:
                with anyio.fail_after(1):
                    while task_id not in [r["taskId"] for r in (await anext(events))[1]["live"]]:
                        pass
                assert time.monotonic() - started < 1
                async with client.stream("GET", url + f"console/api/tasks/{task_id}/timeline",
                                         headers=key("alice")) as timeline:
                    items = sse(timeline)
                    assert (await anext(items))[0] == "reset"
                    name, created = await anext(items)
                    assert created == {"kind": "created", "role": "ROLE_USER",
                                       "text": "<b>bold</b>", "position": 0}
                    kinds: list[str] = []
                    with anyio.fail_after(5):
                        while kinds.count("trajectory") < 3:
                            kinds.append((await anext(items))[1]["kind"])
                    assert kinds[:3] == ["run", "holder", "status"]
            with anyio.fail_after(2):  # the hang-up
                while True:
                    snapshot = (await anext(events))[1]
                    ended = [r for r in snapshot["ended"] if r["taskId"] == task_id]
                    if ended:
                        break
            assert ended[0]["reason"] == "hang-up" and snapshot["live"] == []
        async with client.stream("GET", url + f"console/api/tasks/{task_id}/timeline",
                                 headers=key("alice")) as timeline:
            seen = [item async for item in sse(timeline)]
        assert seen[-1] == ("end", {"taskId": task_id, "state": "canceled"})
        marks = [data["text"] for name, data in seen if data.get("kind") == "holder"]
        assert marks == ["stream took a hold", "stream let go"]
        end = [data for name, data in seen if data.get("state") == "canceled"]
        assert end[0]["reason"] == "hang-up"


async def test_an_open_feed_shows_the_shutdown_ends_then_lets_the_server_stop(
        tmp_path: Path) -> None:
    seen: list[tuple[str, Any]] = []
    async with httpx.AsyncClient(timeout=10) as client, anyio.create_task_group() as tg:
        async with served(make_app(tmp_path), grace=0.1) as url:
            async def feed() -> None:
                async with client.stream("GET", url + "console/api/runs/stream",
                                         headers=key("ops")) as runs:
                    async for item in sse(runs):
                        seen.append(item)

            tg.start_soon(feed)
            send = {"message": text_message("detached work"),
                    "configuration": {"returnImmediately": True}}
            reply = await rpc(client, url, "SendMessage", send, headers=key("alice"))
            task_id = reply["result"]["task"]["id"]
            with anyio.fail_after(2):
                while not any(task_id in str(data.get("live")) for _, data in seen):
                    await anyio.sleep(0.02)
            started = time.monotonic()
        # The server stopped (served waited for it) without waiting out the feed.
        assert time.monotonic() - started < 3
    assert seen[-1][0] == "shutdown"
    ended = [r for _, data in seen for r in data.get("ended", [])]
    assert [(r["taskId"], r["reason"], r["why"]) for r in ended] == [
        (task_id, "shutdown", "return-immediately")]


async def test_without_authentication_the_console_shows_every_run(tmp_path: Path) -> None:
    app = A2AApp(agent, console=ConsoleSettings())
    async with served(app) as url, httpx.AsyncClient() as client:
        page = await client.get(url + "console")
        assert page.status_code == 200 and "live-body" in page.text
        assert (await client.get(url + "console/api/me")).json() == {
            "principal": "", "operator": True, "authentication": False}
        async with held_run(client, url, "alice") as task_id:  # the key is ignored: anonymous
            runs = (await client.get(url + "console/api/runs")).json()
            assert [r["taskId"] for r in runs["live"]] == [task_id]
            cancel = url + f"console/api/tasks/{task_id}/cancel"
            assert (await client.post(cancel)).status_code == 403  # still no cross-site write
            assert (await client.post(cancel, headers=WRITE)).status_code == 200


def test_operators_by_id_or_jwt_scope_and_owners_by_tenant() -> None:
    from scoped_a2a.protocol.principal import Principal
    from scoped_a2a.server.console.access import Access, Viewer

    access = Access(None, ConsoleSettings(frozenset({"ops"}), "console:admin"), None)
    assert access._operator(Principal("ops"))
    assert access._operator(Principal("svc", {"scope": "read console:admin"}))
    assert access._operator(Principal("svc", {"scp": ["console:admin"]}))
    assert not access._operator(Principal("svc", {"scope": "console:admin:x read"}))
    assert not access._operator(Principal("alice"))
    alice = Viewer(Principal("alice", tenants=frozenset({"acme"})), operator=False)
    assert alice.sees("alice\x1facme")
    assert not alice.sees("alice\x1fother") and not alice.sees("alice")
    assert not alice.sees("bob\x1facme")
    assert Viewer(Principal("alice"), operator=False).sees("alice\x1fany")


async def test_a_parked_run_then_detached_by_its_follow_up(tmp_path: Path) -> None:
    async with served(make_app(tmp_path)) as url, httpx.AsyncClient() as client:
        first = await rpc(client, url, "SendMessage", {"message": text_message("ask")},
                          headers=key("alice"))
        task_id = first["result"]["task"]["id"]
        live = (await client.get(url + "console/api/runs", headers=key("alice"))).json()["live"]
        assert [(r["state"], r["parked"], r["mode"]) for r in live] == [
            ("input-required", True, "interactive")]
        follow = {"message": text_message("go on", taskId=task_id),
                  "configuration": {"returnImmediately": True}}
        await rpc(client, url, "SendMessage", follow, headers=key("alice"))
        live = (await client.get(url + "console/api/runs", headers=key("alice"))).json()["live"]
        assert [(r["state"], r["parked"], r["mode"], r["why"]) for r in live] == [
            ("working", False, "detached", "return-immediately")]


def test_nothing_of_the_console_is_imported_when_it_is_off() -> None:
    """Serving (and a request for /console) with the console off imports none of it."""
    import os
    import subprocess
    import sys

    script = """
import sys, anyio, httpx
from scoped_a2a import A2AApp
from scoped_a2a.cli import main  # the CLI module too (its --console options)
sys.path.insert(0, sys.argv[1])
from tests.helpers import served

async def agent(ctx):
    return "ok"

async def go():
    async with served(A2AApp(agent)) as url, httpx.AsyncClient() as client:
        assert (await client.get(url + "console")).status_code == 404

anyio.run(go)
bad = sorted(m for m in sys.modules if m.startswith("scoped_a2a.server.console"))
assert not bad, bad
print("clean")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", script, root], capture_output=True, timeout=60,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.strip() == b"clean"
