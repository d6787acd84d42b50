"""Signed agent cards: ours verify with the official a2a-sdk's verifier, the SDK's with ours,
and a changed card or an untrusted key is refused. Real HTTP through hypercorn, both backends."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from scoped_a2a import A2AApp, A2AClient
from scoped_a2a.client.card_verify import CardSignatureError, CardVerifier
from scoped_a2a.server.card_signing import JWKS_PATH, CardSigner

from .helpers import served
from .test_auth_matrix import asking_agent

pytestmark = pytest.mark.anyio


def ec_key_file(path: Path) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


class CardServer:
    """Serves a fixed card JSON (and a lifespan for hypercorn's trio worker)."""

    def __init__(self, card: dict[str, Any]) -> None:
        self.card = card
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
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(self.card).encode()})


async def test_our_signed_card_verifies_here_and_in_the_sdk(tmp_path: Path) -> None:
    from a2a.client.card_resolver import A2ACardResolver
    from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
    from jwt import PyJWK

    signer = CardSigner(ec_key_file(tmp_path / "card.pem"))
    app = A2AApp(asking_agent, card_signer=signer, card={"description": "signed — ünïcode"})
    async with served(app) as url, httpx.AsyncClient(timeout=20) as http:
        card = (await http.get(url + ".well-known/agent-card.json")).json()
        header = json.loads(_b64(card["signatures"][0]["protected"]))
        assert header == {"alg": "ES256", "typ": "JOSE", "kid": signer.kid,
                          "jku": url.rstrip("/") + JWKS_PATH}
        published = (await http.get(url.rstrip("/") + JWKS_PATH)).json()
        assert published == signer.jwks() and "d" not in published["keys"][0]
        # Our client, trusting the published keys.
        async with A2AClient(url, verify_card=CardVerifier(published)) as client:
            assert (await client.card()).description == "signed — ünïcode"
            assert (await client.send("hi")).status.message.text == "hello "  # type: ignore
        # The official SDK's verifier, with the same key.
        key = PyJWK(published["keys"][0])
        verifier = create_signature_verifier(lambda kid, jku: key, ["ES256"])
        sdk_card = await A2ACardResolver(http, url.rstrip("/")).get_agent_card(
            signature_verifier=verifier)
        assert sdk_card.name == card["name"]
        # A key we do not trust: refused by both.
        other = CardSigner(ec_key_file(tmp_path / "other.pem"), kid=signer.kid)
        async with A2AClient(url, verify_card=CardVerifier(other.jwks())) as client:
            with pytest.raises(CardSignatureError):
                await client.card()
        stranger = PyJWK(other.jwks()["keys"][0])
        with pytest.raises(InvalidSignaturesError):
            await A2ACardResolver(http, url.rstrip("/")).get_agent_card(
                signature_verifier=create_signature_verifier(lambda k, j: stranger, ["ES256"]))


async def test_sdk_signed_card_verifies_here_and_changes_are_refused(tmp_path: Path) -> None:
    from a2a.client.card_resolver import parse_agent_card
    from a2a.utils.signing import create_agent_card_signer
    from google.protobuf.json_format import MessageToDict
    from jwt import PyJWK

    key_file = ec_key_file(tmp_path / "sdk.pem")
    ours = CardSigner(key_file, kid="sdk-key")  # only to get the public JWK of the same key
    sdk_signer = create_agent_card_signer(
        key_file.read_bytes(), {"kid": "sdk-key", "alg": "ES256", "jku": None, "typ": "JOSE"})
    source = {
        "name": "sdk agent", "description": "signed by a2a-sdk", "version": "1.0.0",
        "supportedInterfaces": [{"url": "http://127.0.0.1:9/", "protocolBinding": "JSONRPC",
                                 "protocolVersion": "1.0"}],
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}],
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
    }
    signed = MessageToDict(sdk_signer(parse_agent_card(copy.deepcopy(source))))
    assert PyJWK(ours.public_jwk)  # the JWK is usable
    verifier = CardVerifier(ours.jwks())
    assert verifier.verify(signed) == "sdk-key"
    for tamper in (
        lambda c: c.update(description="changed"),
        lambda c: c["supportedInterfaces"][0].update(url="http://evil.example/"),
        lambda c: c["capabilities"].update(pushNotifications=True),
    ):
        changed = copy.deepcopy(signed)
        tamper(changed)
        with pytest.raises(CardSignatureError):
            verifier.verify(changed)
    unsigned = {k: v for k, v in signed.items() if k != "signatures"}
    with pytest.raises(CardSignatureError, match="not signed"):
        verifier.verify(unsigned)
    # Over HTTP: the SDK-signed card served by another server, fetched by our client.
    server = CardServer(signed)
    async with served(server) as url:  # type: ignore[arg-type]
        async with A2AClient(url, verify_card=verifier) as client:
            assert (await client.card()).name == "sdk agent"
        server.card = {**signed, "description": "changed in transit"}
        async with A2AClient(url, verify_card=verifier) as client:
            with pytest.raises(CardSignatureError):
                await client.card()


def _b64(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_serve_signs_its_card(tmp_path: Path) -> None:
    """``serve --card-signing-key PEM --card-signing-kid KID``; an unusable key is one line."""
    import os
    import subprocess
    import sys

    from .test_auth import ROOT, _wait_for

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    base = [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0"]
    (tmp_path / "junk.pem").write_text("not a key")
    bad = subprocess.run([*base, "--card-signing-key", str(tmp_path / "junk.pem")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: cannot use the card signing")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*base, "--card-signing-key",
                                 str(ec_key_file(tmp_path / "k.pem")), "--card-signing-kid",
                                 "k1"], stdout=out, stderr=out, env=env)
    try:
        url = _wait_for(log, "serving on ")
        with httpx.Client(timeout=10) as http:
            card = http.get(url + ".well-known/agent-card.json").json()
            jwks = http.get(url.rstrip("/") + JWKS_PATH).json()
        assert CardVerifier(jwks).verify(card) == "k1"
    finally:
        proc.terminate()
        proc.wait(20)
