"""The client's credentials: A2AClient(auth=...), clear errors on 401/403, send --token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import httpx
import pytest

from scoped_a2a import A2AApp, A2AClient
from scoped_a2a.client import ApiKey, BearerToken
from scoped_a2a.protocol.errors import PermissionDenied, Unauthenticated
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys
from scoped_a2a.server.auth.bearer_jwt import JwtBearer

from .auth_tokens import AUDIENCE, ISSUER, SigningKey, jwks
from .helpers import served
from .test_auth import ROOT, _wait_for
from .test_auth_matrix import asking_agent

pytestmark = pytest.mark.anyio


class HeaderAuth(httpx.Auth):
    """A caller's own httpx.Auth: the client must pass it through untouched."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["X-API-Key"] = "bob-key"
        yield request


@pytest.fixture
def app(tmp_path: Path) -> tuple[A2AApp, SigningKey]:
    key = SigningKey()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks(key)))
    (tmp_path / "keys.txt").write_text("alice:alice-key\nbob:bob-key\n")
    auth = Authenticator([
        ApiKeys(tmp_path / "keys.txt"),
        JwtBearer(str(tmp_path / "jwks.json"), issuer=ISSUER, audience=AUDIENCE,
                  required_scopes=["a2a"]),
    ])
    return A2AApp(asking_agent, authenticate=auth), key


async def test_each_kind_of_credential(app: tuple[A2AApp, SigningKey]) -> None:
    server, key = app
    async with served(server) as url:
        for auth, who in [(ApiKey("alice-key"), "alice"), ("bob-key", "bob"),
                          (BearerToken(key.token("carol", scope="a2a")), "carol"),
                          (HeaderAuth(), "bob")]:
            async with A2AClient(url, auth=auth) as client:
                task = await client.send("hi")
                assert task.status.message.text == f"hello {who}"  # type: ignore[union-attr]
                async with client.stream("hi") as events:
                    assert [e async for e in events]


async def test_refusals_say_which_credential_is_missing(
        app: tuple[A2AApp, SigningKey]) -> None:
    server, key = app
    async with served(server) as url:
        async with A2AClient(url) as client:
            with pytest.raises(Unauthenticated) as none_sent:
                await client.send("hi")
            with pytest.raises(Unauthenticated):
                async with client.stream("hi") as events:
                    _ = [e async for e in events]
        text = str(none_sent.value)
        assert "none was sent" in text
        assert "apiKey (an API key in the X-API-Key header)" in text
        assert "bearer (Bearer token, JWT)" in text
        async with A2AClient(url, auth=ApiKey("stolen")) as client:
            with pytest.raises(Unauthenticated, match="refused the credential sent"):
                await client.send("hi")
        async with A2AClient(url, auth=BearerToken(key.token("eve"))) as client:
            with pytest.raises(PermissionDenied, match="HTTP 403"):  # no "a2a" scope
                await client.send("hi")


def test_send_token_and_environment(tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_text("alice:alice-key\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    env.pop("SCOPED_A2A_TOKEN", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--api-keys",
             str(tmp_path / "keys.txt")], stdout=out, stderr=out, env=env)
    try:
        url = _wait_for(log, "serving on ")
        send = [sys.executable, "-m", "scoped_a2a", "send", url, "hello"]
        ok = subprocess.run([*send, "--token", "alice-key"], env=env, capture_output=True,
                            text=True, timeout=60)
        assert ok.returncode == 0, ok.stderr
        via_env = subprocess.run(send, env={**env, "SCOPED_A2A_TOKEN": "alice-key"},
                                 capture_output=True, text=True, timeout=60)
        assert via_env.returncode == 0, via_env.stderr
        refused = subprocess.run(send, env=env, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 3
        assert "none was sent" in refused.stderr and "--token" in refused.stderr
        # The card asks for an X-API-Key: the line names the option that sends one (it named
        # only --token, and "send --token" whatever the command).
        assert "--api-key" in refused.stderr and "send --token" not in refused.stderr, \
            refused.stderr
    finally:
        proc.terminate()
        proc.wait(20)
