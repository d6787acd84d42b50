"""API keys (static bearer tokens) from a file: ``id:sha256:HEX`` or ``id:TOKEN``, one a line.

Only SHA-256 hashes are kept in memory; a plain token in the file is hashed when read. A bare
64-hex-digit value is read as a hash too (so ``id:sha256hex`` works), which means a plain token
of exactly 64 hex digits must be written with its hash instead. Blank lines and ``#`` comments
are ignored. The ``id`` is the principal id (tasks are owned by it); several keys may share one.

A request presents its key as ``X-API-Key: TOKEN`` or ``Authorization: Bearer TOKEN``. The
presented token is hashed and compared with **every** stored hash with ``hmac.compare_digest``
(no early exit, no dict lookup), so timing does not tell how close a guess was.

Rotation: the file is re-read when its modification time changes (checked at most once a
second) and on :meth:`ApiKeys.reload` (``serve`` calls it on SIGHUP). A file that cannot be read
or has a bad line keeps the previous keys and logs why (a half-written file locks nobody out);
at start-up the same mistake raises ``ValueError`` naming the line.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from typing import Any

from ...protocol.errors import Unauthenticated
from ...protocol.principal import Principal
from ..asgi import Scope, header

log = logging.getLogger("scoped_a2a.auth")

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
CHECK_EVERY = 1.0
"""Seconds between checks of the key file's modification time."""


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as the key file may hold it (``id:sha256:<this>``)."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_keys(text: str, source: str = "the key file") -> list[tuple[str, bytes]]:
    """``(principal id, sha256 digest)`` pairs from a key file's text; ValueError naming a bad
    line (by number, never its content: it may be a secret)."""
    keys: list[tuple[str, bytes]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        ident, sep, value = line.partition(":")
        ident, value = ident.strip(), value.strip()
        if not sep or not ident or not value:
            raise ValueError(f"{source} line {number}: expected id:sha256:HEX or id:TOKEN")
        if value.startswith("sha256:"):
            value = value[len("sha256:"):]
            if not _HEX64.fullmatch(value):
                raise ValueError(f"{source} line {number}: sha256: needs 64 hex digits")
            keys.append((ident, bytes.fromhex(value)))
        elif _HEX64.fullmatch(value):
            keys.append((ident, bytes.fromhex(value)))
        else:
            keys.append((ident, hashlib.sha256(value.encode()).digest()))
    if not keys:
        raise ValueError(f"{source} holds no keys")
    return keys


class ApiKeys:
    """The API-key scheme (see the module docstring). ``path``: the key file."""

    challenge = 'Bearer realm="a2a"'

    def __init__(self, path: str | os.PathLike[str], *, name: str = "apiKey",
                 header_name: str = "X-API-Key") -> None:
        self.path = os.fspath(path)
        self.name = name
        self.header_name = header_name
        self._header = header_name.lower().encode()
        self._mtime = self._stat()
        self._checked = time.monotonic()
        self._keys = self._load(strict=True)
        self.reloads = 0
        """How many times the file was re-read after start-up (tests and metrics)."""

    def _stat(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return -1.0

    def _load(self, *, strict: bool) -> list[tuple[str, bytes]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                return parse_keys(f.read(), self.path)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            if strict:
                raise ValueError(f"cannot use the API key file {self.path}: {exc}") from None
            log.error("kept the previous API keys: %s", exc)
            return self._keys

    def reload(self) -> None:
        """Re-read the key file now (a bad file keeps the previous keys, and says why: then
        only that is logged, not a reload)."""
        self._mtime = self._stat()
        before = self._keys
        self._keys = self._load(strict=False)
        self.reloads += 1
        if self._keys is not before:
            log.info("API keys reloaded from %s (%d keys)", self.path, len(self._keys))

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._checked < CHECK_EVERY:
            return
        self._checked = now
        if self._stat() != self._mtime:
            self.reload()

    def _presented(self, scope: Scope) -> str | None:
        key = header(scope, self._header)
        if key is not None:
            return key.strip()
        auth = header(scope, b"authorization")
        if auth is not None:
            kind, _, token = auth.strip().partition(" ")
            if kind.lower() == "bearer" and token.strip():
                return token.strip()
        return None

    async def authenticate(self, scope: Scope) -> Principal | None:
        token = self._presented(scope)
        if token is None:
            return None
        self._maybe_reload()
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: str | None = None
        for ident, stored in self._keys:
            # Every entry is compared, whatever matched before: constant work per request.
            if hmac.compare_digest(digest, stored) and found is None:
                found = ident
        if found is None:
            raise Unauthenticated("unknown API key")
        return Principal(found, {"scheme": self.name}, self.name)

    def card_scheme(self) -> dict[str, Any]:
        description = f"An API key in the {self.header_name} header (or as a Bearer token)"
        return {
            "apiKeySecurityScheme": {"location": "header", "name": self.header_name,
                                     "description": description},
            # 0.3 (OpenAPI) shape
            "type": "apiKey", "in": "header", "name": self.header_name,
            "description": description,
        }
