"""Checking an agent card's signatures against keys the caller trusts (A2A 1.0 §8.4.3).

``A2AClient(verify_card=CardVerifier(jwks))`` refuses a card none of whose signatures verifies
with a trusted key: :class:`CardSignatureError` (an ``InvalidAgentResponse``), before any call
is made. The keys come from the caller (a JWKS mapping or file), never from the card: a ``jku``
in a signature's header is ignored, since a forged card would name the forger's keys. The
signed bytes are :func:`~scoped_a2a.protocol.card_canonical.canonical_card`'s, which is what the
official a2a-sdk signs, so its cards verify here and ours verify there. Needs PyJWT.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..protocol.card_canonical import canonical_card
from ..protocol.errors import InvalidAgentResponse

DEFAULT_ALGORITHMS = ("RS256", "PS256", "ES256", "ES384", "ES512", "EdDSA")


class CardSignatureError(InvalidAgentResponse):
    """The card is unsigned, or no signature verifies with a trusted key."""


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CardVerifier:
    """Trusted card-signing keys: a JWKS (mapping, or the path of a JSON file)."""

    def __init__(self, jwks: Mapping[str, Any] | str | os.PathLike[str], *,
                 algorithms: Sequence[str] = DEFAULT_ALGORITHMS) -> None:
        import jwt

        if not isinstance(jwks, Mapping):
            with open(jwks, encoding="utf-8") as f:
                jwks = json.load(f)
        assert isinstance(jwks, Mapping)
        bad = [a for a in algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if bad:
            raise ValueError(f"card signatures must use asymmetric algorithms, not {bad}")
        self._jwt = jwt
        self.algorithms = list(algorithms)
        self._keys: dict[str, Any] = {}
        for k in jwks.get("keys", ()):
            if isinstance(k, Mapping) and k.get("kty") in ("RSA", "EC", "OKP") and "d" not in k:
                self._keys[str(k.get("kid", ""))] = dict(k)
        if not self._keys:
            raise ValueError("the trusted JWKS holds no public signing keys")

    def verify(self, card: Mapping[str, Any]) -> str:
        """Return the ``kid`` of a signature that verifies; raise CardSignatureError if none."""
        signatures = card.get("signatures")
        if not isinstance(signatures, list) or not signatures:
            raise CardSignatureError("the agent card is not signed (verification was asked for)")
        payload = base64.urlsafe_b64encode(canonical_card(card)).rstrip(b"=").decode()
        jwt = self._jwt
        for sig in signatures:
            if not isinstance(sig, Mapping):
                continue
            protected, signature = sig.get("protected"), sig.get("signature")
            if not isinstance(protected, str) or not isinstance(signature, str):
                continue
            try:
                header = json.loads(_b64decode(protected))
            except (binascii.Error, ValueError):
                continue
            if not isinstance(header, dict):
                continue
            alg, kid = header.get("alg"), str(header.get("kid", ""))
            jwk = self._keys.get(kid)
            if jwk is None or alg not in self.algorithms:
                continue
            try:
                key = jwt.PyJWK(jwk, algorithm=alg)
                jwt.api_jws.decode_complete(f"{protected}.{payload}.{signature}", key=key.key,
                                            algorithms=[alg])
            except jwt.PyJWTError:
                continue
            return kid
        raise CardSignatureError(
            "no signature of the agent card verifies with a trusted key: the card was changed, "
            "or signed by a key you do not trust")
