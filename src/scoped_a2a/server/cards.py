"""What an app publishes about itself: the public agent card and the extended card (no I/O).

The card's fields are fixed when the app is built (the agent's own fields, then the app's
``card=``), but its URLs are not: without a ``public_url`` the card advertises the base URL the
request came to (its ``Host`` and the mount's ``root_path``). So the public card is built once
per base URL and cached with its entity tag; the cache is bounded because ``Host`` is the
client's to choose. A signer, when set, signs each card as it is built.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from .asgi import Scope, header
from .auth import Authenticate, card_security
from .card import build_card
from .card_http import entity_tag
from .card_signing import JWKS_PATH, CardSigner

_encode = msgspec.json.Encoder().encode
MAX_CACHED_URLS = 64
"""Base URLs whose card is kept built; past this the cache starts again (many Host headers)."""


class CardPublisher:
    """Builds, caches and signs one app's cards.

    :param fields: the card fields set over the generated card (the agent's, then the app's).
    :param extended: the extended card's extra fields, or None (no extended card).
    :param features: what the app does that the card declares (``push_notifications``,
        ``cancel_on_disconnect``, ``preferred_binding``, ``idempotent_send``, ``v03_fields``,
        ``grpc``), passed on to :func:`~.card.build_card`.
    :param public_url: the URL the cards advertise; None: taken from each request. It may be
        set later (``serve`` sets it once the port is bound).
    """

    def __init__(self, fields: Mapping[str, Any], *, name: str,
                 extended: Mapping[str, Any] | None, authenticate: Authenticate | None,
                 signer: CardSigner | None, public_url: str | None,
                 features: Mapping[str, Any]) -> None:
        self.fields = dict(fields)
        self.extended_fields = dict(extended) if extended is not None else None
        self.public_url = public_url
        self.built_at = time.time()
        """The cards' ``Last-Modified``: they are fixed from here on."""
        self._name = name
        self._security = card_security(authenticate)
        self._signer = signer
        self._features = dict(features)
        self._cache: dict[str, tuple[bytes, bytes]] = {}  # base URL -> (card, its ETag)

    def base_url(self, scope: Scope, root_path: str) -> str:
        """The URL the request's card advertises: ``public_url``, else where it came to."""
        if self.public_url:
            return self.public_url
        host = header(scope, b"host")
        if host is None:
            server = scope.get("server") or ("localhost", 80)
            host = f"{server[0]}:{server[1]}"
        return f"{scope.get('scheme', 'http')}://{host}{root_path}/"

    def public(self, scope: Scope, root_path: str) -> tuple[bytes, bytes]:
        """The public card for the request's base URL and its ETag, built once per URL."""
        url = self.base_url(scope, root_path)
        cached = self._cache.get(url)
        if cached is None:
            body = self._build(url, {}, extended=self.extended_fields is not None)
            if len(self._cache) >= MAX_CACHED_URLS:
                self._cache.clear()
            cached = self._cache[url] = (body, entity_tag(body))
        return cached

    def extended(self) -> bytes:
        """The extended card (``GetExtendedAgentCard``): the public fields and the extras."""
        return self._build(self.public_url or "/", self.extended_fields or {}, extended=True)

    def _build(self, url: str, extra: Mapping[str, Any], *, extended: bool) -> bytes:
        card = build_card(url, {**self._security, **self.fields, **extra}, name=self._name,
                          extended=extended, **self._features)
        if self._signer is not None:
            jku = url.rstrip("/") + JWKS_PATH if "://" in url else None
            card = self._signer.sign(card, jku=jku)
        return _encode(card)
