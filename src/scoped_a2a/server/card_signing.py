"""Signing our agent card: JWS (RFC 7515) over its canonical bytes (A2A 1.0 §8.4).

:class:`CardSigner` holds a private key (PEM: RSA, EC P-256/384/521 or Ed25519; never an HMAC
secret), and adds to each card a ``signatures`` entry whose protected header names ``alg``,
``typ: JOSE``, ``kid`` and ``jku`` (where this server publishes the public key as a JWKS,
:data:`JWKS_PATH`). The payload is :func:`~scoped_a2a.protocol.card_canonical.canonical_card`,
the same bytes the official a2a-sdk signs and verifies. Needs ``pip install 'scoped-a2a[auth]'``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from ..protocol.card_canonical import canonical_card

JWKS_PATH = "/.well-known/agent-card-jwks.json"
"""Where the app serves the public half of its card-signing key (the signature's ``jku``)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class CardSigner:
    """Signs cards with the private key in ``key_path`` (PEM). ``kid`` defaults to the key's
    RFC 7638 thumbprint. Raises ValueError when the key cannot be used."""

    def __init__(self, key_path: str | os.PathLike[str], *, kid: str | None = None) -> None:
        try:
            import jwt
            from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
            from cryptography.hazmat.primitives.serialization import load_pem_private_key
        except ImportError:  # pragma: no cover - depends on the install
            raise ValueError("signing cards needs pip install 'scoped-a2a[auth]'") from None
        try:
            with open(key_path, "rb") as f:
                key = load_pem_private_key(f.read(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise ValueError(f"cannot use the card signing key {os.fspath(key_path)}: "
                             f"{exc}") from None
        algo: Any
        if isinstance(key, rsa.RSAPrivateKey):
            self.alg, algo = "RS256", jwt.algorithms.RSAAlgorithm
        elif isinstance(key, ec.EllipticCurvePrivateKey):
            self.alg = {"secp256r1": "ES256", "secp384r1": "ES384",
                        "secp521r1": "ES512"}.get(key.curve.name, "")
            algo = jwt.algorithms.ECAlgorithm
        elif isinstance(key, ed25519.Ed25519PrivateKey):
            self.alg, algo = "EdDSA", jwt.algorithms.OKPAlgorithm
        else:
            raise ValueError("the card signing key must be RSA, EC (P-256/384/521) or Ed25519")
        if not self.alg:
            raise ValueError("the card signing key's curve is not P-256, P-384 or P-521")
        self._jwt = jwt
        self._key = key
        public: dict[str, Any] = json.loads(algo.to_jwk(key.public_key()))
        self.kid = kid or _thumbprint(public)
        public.update(kid=self.kid, alg=self.alg, use="sig")
        self.public_jwk = public

    def jwks(self) -> dict[str, Any]:
        """The JWKS that verifies this signer's signatures (served at :data:`JWKS_PATH`)."""
        return {"keys": [self.public_jwk]}

    def sign(self, card: Mapping[str, Any], *, jku: str | None = None) -> dict[str, Any]:
        """A copy of ``card`` with this signer's signature appended to ``signatures``."""
        header: dict[str, Any] = {"alg": self.alg, "typ": "JOSE", "kid": self.kid}
        if jku:
            header["jku"] = jku
        compact = self._jwt.api_jws.encode(canonical_card(card), self._key,
                                           algorithm=self.alg, headers=header)
        protected, _, signature = compact.split(".")
        signed = dict(card)
        signed["signatures"] = [*card.get("signatures", ()),
                                {"protected": protected, "signature": signature}]
        return signed


def _thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638: SHA-256 over the key's required members in lexicographic order."""
    members = {"RSA": ("e", "kty", "n"), "EC": ("crv", "kty", "x", "y"),
               "OKP": ("crv", "kty", "x")}[str(jwk["kty"])]
    doc = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return _b64(hashlib.sha256(doc.encode()).digest())
