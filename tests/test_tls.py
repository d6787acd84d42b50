"""TLS and client certificates through hypercorn, on both backends; the CA is made by trustme."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.streams.tls
import httpx
import pytest
import trustme

from scoped_a2a import A2AApp, A2AClient, serve
from scoped_a2a.protocol.errors import Unauthenticated
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys
from scoped_a2a.server.tls import ClientCertificate

from .helpers import text_message
from .test_auth_matrix import asking_agent

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def served_tls(app: A2AApp, tmp_path: Path, ca: trustme.CA, *,
                     client_ca: trustme.CA | None = None) -> AsyncIterator[str]:
    server_pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    ca_file = None
    if client_ca is not None:
        ca_file = tmp_path / "client-ca.pem"
        client_ca.cert_pem.write_to_path(str(ca_file))
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, certfile=str(server_pem),
            keyfile=str(server_pem), ca_certs=str(ca_file) if ca_file else None,
            task_status=task_status))
        try:
            yield f"https://127.0.0.1:{port}/"
        finally:
            shutdown.set()


def client_context(ca: trustme.CA, cert: trustme.LeafCert | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    return ctx


async def send(client: httpx.AsyncClient, url: str, **params: object) -> httpx.Response:
    return await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                        "params": {"message": text_message("hi"), **params}},
                             headers={"A2A-Version": "1.0"})


async def test_https_serves_the_card_and_calls(tmp_path: Path) -> None:
    ca = trustme.CA()
    app = A2AApp(asking_agent, public_url=None)
    async with served_tls(app, tmp_path, ca) as url:
        async with httpx.AsyncClient(verify=client_context(ca), timeout=20) as client:
            card = (await client.get(url + ".well-known/agent-card.json")).json()
            assert card["url"] == url  # the card advertises https
            r = await send(client, url)
            assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # A client that does not trust our CA refuses the server.
        async with httpx.AsyncClient(timeout=20) as untrusting:
            with pytest.raises(httpx.ConnectError):
                await untrusting.get(url + ".well-known/agent-card.json")


@pytest.mark.parametrize("http2", [False, True])
async def test_alpn_offers_h2_only_when_http2_is_on(tmp_path: Path, http2: bool) -> None:
    """Over TLS the protocol is chosen by ALPN before any byte of HTTP: without ``http2`` the
    server must not pick ``h2`` (hypercorn's default list offers it), or HTTP/2 would be on for
    every TLS client whatever ``serve`` was told."""
    ca = trustme.CA()
    server_pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            A2AApp(asking_agent, public_url=None), host="127.0.0.1", port=0, shutdown=shutdown,
            certfile=str(server_pem), keyfile=str(server_pem), http2=http2,
            task_status=task_status))
        ctx = client_context(ca)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        stream = await anyio.connect_tcp("127.0.0.1", port, ssl_context=ctx,
                                         tls_standard_compatible=False)
        async with stream:
            chosen = stream.extra(anyio.streams.tls.TLSAttribute.alpn_protocol)
        shutdown.set()
    assert chosen == ("h2" if http2 else "http/1.1")


async def test_client_certificates_name_the_principal(tmp_path: Path) -> None:
    ca, client_ca, rogue_ca = trustme.CA(), trustme.CA(), trustme.CA()
    alice = client_ca.issue_cert("alice@example.test", common_name="alice")
    bob = client_ca.issue_cert("bob@example.test", common_name="bob")
    rogue = rogue_ca.issue_cert("alice@example.test", common_name="alice")
    keys = tmp_path / "keys.txt"
    keys.write_text("carol:carol-key\n")
    app = A2AApp(asking_agent,
                 authenticate=Authenticator([ClientCertificate(), ApiKeys(keys)]))
    async with served_tls(app, tmp_path, ca, client_ca=client_ca) as url:
        async with httpx.AsyncClient(verify=client_context(ca, alice), timeout=20) as as_alice:
            card = (await as_alice.get(url + ".well-known/agent-card.json")).json()
            assert "mtlsSecurityScheme" in card["securitySchemes"]["mtls"]
            r = await send(as_alice, url)
            task = r.json()["result"]["task"]
            assert task["status"]["message"]["parts"][0]["text"] == "hello alice"
        async with httpx.AsyncClient(verify=client_context(ca, bob), timeout=20) as as_bob:
            r = await as_bob.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                             "params": {"id": task["id"]}},
                                  headers={"A2A-Version": "1.0"})
            assert r.json()["error"]["code"] == -32001  # alice's task, not bob's
        # No certificate: another scheme may still accept; with none at all, 401.
        async with httpx.AsyncClient(verify=client_context(ca), timeout=20) as anonymous:
            assert (await send(anonymous, url)).status_code == 401
            r = await anonymous.post(
                url, headers={"X-API-Key": "carol-key", "A2A-Version": "1.0"},
                json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
            assert r.json()["result"]["tasks"] == []
        # A certificate from a CA the server does not trust: the handshake fails.
        async with httpx.AsyncClient(verify=client_context(ca, rogue), timeout=20) as forged:
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                await send(forged, url)


async def test_a_client_certificate_without_common_name_is_told_what_is_wrong(
        tmp_path: Path) -> None:
    """A certificate from the trusted CA whose subject has no commonName passes the handshake
    but names no caller: the 401 says so (on JSON-RPC and HTTP+JSON), instead of the text for a
    request that carried no credential."""
    ca, client_ca = trustme.CA(), trustme.CA()
    nameless = client_ca.issue_cert("nameless@example.test", organization_name="Acme")
    keys = tmp_path / "keys.txt"
    keys.write_text("carol:carol-key\n")
    app = A2AApp(asking_agent,
                 authenticate=Authenticator([ClientCertificate(), ApiKeys(keys)]))
    async with served_tls(app, tmp_path, ca, client_ca=client_ca) as url:
        async with httpx.AsyncClient(verify=client_context(ca, nameless), timeout=20) as http:
            r = await send(http, url)
            assert r.status_code == 401, r.text
            message = r.json()["error"]["message"]
            rest = await http.get(url + "tasks", headers={"A2A-Version": "1.0"})
            assert rest.status_code == 401, rest.text
            assert rest.json()["error"]["message"] == message
            # The same certificate with an API key: another scheme still accepts.
            ok = await http.get(url + "tasks", headers={"X-API-Key": "carol-key"})
            assert ok.status_code == 200, ok.text
            # Our client says what is wrong with the certificate it sent, on either binding.
            for binding in ("jsonrpc", "rest"):
                async with A2AClient(url, http=http, transport=binding) as client:
                    with pytest.raises(Unauthenticated) as refused:
                        await client.send("hi")
                said = str(refused.value)
                assert "no commonName" in said and "none was sent" not in said, said
        async with httpx.AsyncClient(verify=client_context(ca), timeout=20) as anonymous:
            plain = (await send(anonymous, url)).json()["error"]["message"]
    assert "client certificate" in message and "no commonName" in message, message
    assert "organizationName=Acme" in message, message
    assert "certificate" not in plain, plain  # no certificate sent: the usual text


def test_serve_cli_with_tls_and_client_certificates(tmp_path: Path) -> None:
    """``serve --certfile --keyfile --ca-certs``: HTTPS, and the certificate is the principal;
    a missing key file is one line and exit status 2, before listening."""
    import os
    import subprocess
    import sys

    from .test_auth import ROOT, _wait_for

    ca, client_ca = trustme.CA(), trustme.CA()
    server_pem, ca_pem = tmp_path / "server.pem", tmp_path / "client-ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    client_ca.cert_pem.write_to_path(str(ca_pem))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    base = [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0"]
    bad = subprocess.run([*base, "--certfile", str(server_pem), "--keyfile",
                          str(tmp_path / "nope.pem")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "TLS files" in bad.stderr
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*base, "--certfile", str(server_pem), "--keyfile",
                                 str(server_pem), "--ca-certs", str(ca_pem)],
                                stdout=out, stderr=out, env=env)
    try:
        url = _wait_for(log, "serving on ")
        assert url.startswith("https://")
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        hdr = {"A2A-Version": "1.0"}
        cert = client_ca.issue_cert("ci@example.test", common_name="ci")
        with httpx.Client(verify=client_context(ca, cert), timeout=10) as client:
            assert client.post(url, json=body, headers=hdr).status_code == 200
        with httpx.Client(verify=client_context(ca), timeout=10) as client:
            assert client.post(url, json=body, headers=hdr).status_code == 401
    finally:
        proc.terminate()
        proc.wait(20)
