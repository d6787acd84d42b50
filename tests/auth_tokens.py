"""Test credentials made on the fly (no checked-in keys): RSA keys, a JWKS, JWTs good and bad."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://issuer.test"
AUDIENCE = "scoped-a2a-test"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    """An RSA key pair with a kid; ``jwk`` is its public half as a JWK."""

    kid: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    private: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @property
    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    @property
    def jwk(self) -> dict[str, Any]:
        data = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        data.update(kid=self.kid, use="sig", alg="RS256")
        return dict(data)

    def token(self, sub: str, *, aud: str = AUDIENCE, iss: str = ISSUER, exp_in: float = 300,
              kid: str | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {"sub": sub, "aud": aud, "iss": iss, "iat": now, "exp": now + int(exp_in),
                   **claims}
        return jwt.encode(payload, self.private, algorithm="RS256",
                          headers={"kid": kid or self.kid})


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [k.jwk for k in keys]}


def unsigned_token(sub: str, kid: str) -> str:
    """``alg: none``: a token with no signature at all."""
    now = int(time.time())
    head = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps({"sub": sub, "aud": AUDIENCE, "iss": ISSUER,
                            "exp": now + 300}).encode())
    return f"{head}.{body}."


def hmac_confused_token(sub: str, key: SigningKey) -> str:
    """HS256 "signed" with the RSA public key's PEM as the HMAC secret (the confusion attack)."""
    now = int(time.time())
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = _b64(json.dumps({"sub": sub, "aud": AUDIENCE, "iss": ISSUER,
                            "exp": now + 300}).encode())
    sig = hmac.new(key.public_pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"
