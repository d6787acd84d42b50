"""JWT bearer tokens, verified with PyJWT against keys from a JWKS file or URL.

What is checked: the signature with a key of the JWKS (chosen by ``kid``), an algorithm from
the allow-list (asymmetric only: ``none`` and HMAC are refused when the verifier is built, so a
token "signed" with the public key as an HMAC secret never verifies), ``exp`` (required) with
``leeway`` seconds, ``nbf``/``iat`` when present, ``iss`` and ``aud`` when configured (then
required). The principal id is the ``sub`` claim (or ``principal_claim``). With
``required_scopes`` a token that verifies but lacks one (in ``scope`` or ``scp``) is 403. With
``tenants_claim`` the principal may use only the tenants that claim lists (a list or a
space-separated string); a request for another tenant is refused with -32043.

Keys (:class:`JwksKeys`): a file is re-read when its modification time changes; a URL is fetched
with httpx under an AnyIO deadline, cached, and re-fetched when a token names an unknown ``kid``
at most once every ``refresh_interval`` seconds (an attacker's made-up kids cannot make us
hammer the issuer). The document is bounded (bytes and keys). A fetch that fails keeps the keys
already cached.

Verified tokens are cached (bounded, ``cache_size``): a client sends the same token for its
lifetime, so the signature is checked once, not on every request (RS256 verification is about
0.1 ms, a noticeable share of a small request). A cached token is still refused once its
``exp`` (plus leeway) passes, and the cache is emptied whenever the keys change (a rotated-out
key stops verifying at once).

PyJWT (``pip install scoped-a2a[auth]``) is imported only when a verifier is built.
Cancellation: a fetch in progress is abandoned with the request; the cache is unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import anyio
import httpx

from ...protocol.errors import PermissionDenied, Unauthenticated
from ...protocol.principal import Principal
from ...timeouts import fail_after
from ..asgi import Scope, header

log = logging.getLogger("scoped_a2a.auth")

DEFAULT_ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
_FAMILY = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}
MAX_JWKS_BYTES = 256 << 10
MAX_KEYS = 64
CHECK_EVERY = 1.0
"""Seconds between checks of a JWKS file's modification time."""


def _require_jwt() -> Any:
    try:
        import jwt
    except ImportError:  # pragma: no cover - depends on the install
        raise ValueError(
            "JWT authentication needs PyJWT: pip install 'scoped-a2a[auth]'") from None
    return jwt


class JwksKeys:
    """The verification keys of a JWKS ``source`` (a file path or an http(s) URL)."""

    def __init__(self, source: str, *, refresh_interval: float = 60.0,
                 fetch_timeout: float = 5.0) -> None:
        self.source = source
        self.is_url = source.startswith(("http://", "https://"))
        self.refresh_interval = refresh_interval
        self.fetch_timeout = fetch_timeout
        self._keys: dict[str, dict[str, Any]] = {}
        self.generation = 0
        """Bumped whenever the keys change (verifiers drop what they cached)."""
        self._fetched_at = -float("inf")
        self._mtime = -1.0
        self._checked = time.monotonic()
        self._lock = anyio.Lock()
        self.fetches = 0
        """How many times the keys were (re)loaded: tests and metrics."""
        if not self.is_url:
            self._load_file(strict=True)

    def _parse(self, raw: bytes) -> dict[str, dict[str, Any]]:
        if len(raw) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS is over {MAX_JWKS_BYTES} bytes")
        doc = json.loads(raw)
        keys = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(keys, list):
            raise ValueError("a JWKS is a JSON object with a keys list")
        found: dict[str, dict[str, Any]] = {}
        for k in keys[:MAX_KEYS]:
            if not isinstance(k, dict) or k.get("kty") not in _FAMILY:
                continue  # symmetric ("oct") and unknown keys are never used
            if "d" in k:
                raise ValueError("the JWKS holds a private key; publish only public keys")
            found[str(k.get("kid", ""))] = k
        return found

    def _load_file(self, *, strict: bool) -> None:
        try:
            self._mtime = os.stat(self.source).st_mtime
            with open(self.source, "rb") as f:
                self._set(self._parse(f.read()))
            self.fetches += 1
        except (OSError, ValueError) as exc:
            if strict:
                raise ValueError(f"cannot use the JWKS file {self.source}: {exc}") from None
            log.error("kept the previous JWKS keys: %s", exc)

    async def _fetch(self) -> None:
        self._fetched_at = time.monotonic()  # failed fetches count: no hammering either
        try:
            with fail_after(self.fetch_timeout):
                async with (httpx.AsyncClient(follow_redirects=False) as client,
                            client.stream("GET", self.source) as r):
                    r.raise_for_status()
                    body = b""
                    async for chunk in r.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_JWKS_BYTES:
                            raise ValueError(f"the JWKS is over {MAX_JWKS_BYTES} bytes")
            self._set(self._parse(body))
            self.fetches += 1
        except (OSError, ValueError, TimeoutError, httpx.HTTPError) as exc:
            log.error("could not fetch the JWKS from %s: %s", self.source, exc)

    def _set(self, keys: dict[str, dict[str, Any]]) -> None:
        if keys != self._keys:
            self._keys = keys
            self.generation += 1

    def reload(self) -> None:
        """Re-read a file now; for a URL, allow a fetch on the next request."""
        if self.is_url:
            self._fetched_at = -float("inf")
        else:
            self._load_file(strict=False)

    def check_file(self) -> None:
        """Re-read a JWKS file whose modification time changed (a stat at most once a second);
        a no-op for a URL."""
        now = time.monotonic()
        if self.is_url or now - self._checked < CHECK_EVERY:
            return
        self._checked = now
        try:
            changed = os.stat(self.source).st_mtime != self._mtime
        except OSError:
            changed = False
        if changed:
            self._load_file(strict=False)

    async def key(self, kid: str | None) -> dict[str, Any] | None:
        """The JWK named ``kid`` (the only key when the token names none), or None."""
        if self.is_url and (not self._keys or (kid or "") not in self._keys):
            async with self._lock:
                if time.monotonic() - self._fetched_at >= self.refresh_interval:
                    await self._fetch()
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)


class JwtBearer:
    """The JWT bearer scheme (see the module docstring)."""

    challenge = 'Bearer realm="a2a"'

    def __init__(
        self,
        keys: JwksKeys | str,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway: float = 30.0,
        principal_claim: str = "sub",
        required_scopes: Sequence[str] = (),
        name: str = "bearer",
        cache_size: int = 4096,
        tenants_claim: str | None = None,
    ) -> None:
        self._jwt = _require_jwt()
        bad = [a for a in algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if bad or not algorithms:
            raise ValueError(
                f"JWT algorithms must be asymmetric (RS*, PS*, ES*, EdDSA), not {bad or 'none'}")
        self.keys = keys if isinstance(keys, JwksKeys) else JwksKeys(keys)
        self.issuer = issuer
        self.audience = audience
        self.algorithms = list(algorithms)
        self.leeway = leeway
        self.principal_claim = principal_claim
        self.required_scopes = frozenset(required_scopes)
        self.name = name
        self.cache_size = cache_size
        self.tenants_claim = tenants_claim
        # token -> (principal, exp, nbf) of tokens that verified with the current keys
        self._verified: OrderedDict[str, tuple[Principal, float, float]] = OrderedDict()
        self._generation = self.keys.generation

    def reload(self) -> None:
        self.keys.reload()

    async def authenticate(self, scope: Scope) -> Principal | None:
        auth = header(scope, b"authorization")
        if auth is None:
            return None
        kind, _, token = auth.strip().partition(" ")
        token = token.strip()
        if kind.lower() != "bearer" or not token:
            return None
        self.keys.check_file()
        cached = self._cached(token)
        if cached is not None:
            return cached
        jwt = self._jwt
        try:
            head = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("a bearer token that is not a JWT") from None
        alg = head.get("alg")
        if alg not in self.algorithms:
            raise Unauthenticated(f"a JWT with a refused algorithm {str(alg)[:20]!r}")
        kid = head.get("kid")
        jwk = await self.keys.key(kid if isinstance(kid, str) else None)
        if jwk is None:
            raise Unauthenticated("a JWT signed with an unknown key")
        if not any(str(alg).startswith(p) for p in _FAMILY[jwk["kty"]]):
            raise Unauthenticated(f"a JWT whose algorithm {alg} does not fit its {jwk['kty']} key")
        required = ["exp"] + (["iss"] if self.issuer else []) + (["aud"] if self.audience else [])
        try:
            key = jwt.PyJWK(jwk, algorithm=alg)
            claims: dict[str, Any] = jwt.decode(
                token, key=key.key, algorithms=[alg], issuer=self.issuer,
                audience=self.audience, leeway=self.leeway,
                options={"require": required, "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"a JWT that does not verify ({type(exc).__name__})") from None
        ident = claims.get(self.principal_claim)
        if not isinstance(ident, str) or not ident:
            raise Unauthenticated(f"a JWT without a {self.principal_claim} claim")
        if self.required_scopes:
            granted = claims.get("scope", claims.get("scp", ""))
            have = set(granted.split() if isinstance(granted, str) else granted or ())
            if not self.required_scopes <= have:
                raise PermissionDenied(f"{ident!r} lacks a required scope")
        tenants = None
        if self.tenants_claim is not None:
            # The principal may use only the tenants its token names (none: no tenant at all).
            raw = claims.get(self.tenants_claim, [])
            names = raw.split() if isinstance(raw, str) else raw
            tenants = frozenset(str(t) for t in names) if isinstance(names, list) else frozenset()
        principal = Principal(ident, claims, self.name, tenants)
        if self.cache_size > 0 and self.keys.generation == self._generation:
            self._verified[token] = (principal, float(claims["exp"]),
                                     float(claims.get("nbf", 0) or 0))
            if len(self._verified) > self.cache_size:
                self._verified.popitem(last=False)
        return principal

    def _cached(self, token: str) -> Principal | None:
        """A token that verified before with the current keys and is still in its time window."""
        if self.keys.generation != self._generation:
            self._verified.clear()  # the keys changed: every token is checked again
            self._generation = self.keys.generation
            return None
        hit = self._verified.get(token)
        if hit is None:
            return None
        principal, exp, nbf = hit
        now = time.time()
        if now > exp + self.leeway or now < nbf - self.leeway:
            del self._verified[token]
            return None  # verified again below, and refused with the reason logged
        self._verified.move_to_end(token)
        return principal

    def card_scheme(self) -> dict[str, Any]:
        description = "A JWT bearer token"
        return {
            "httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT",
                                       "description": description},
            # 0.3 (OpenAPI) shape
            "type": "http", "scheme": "Bearer", "bearerFormat": "JWT",
            "description": description,
        }
