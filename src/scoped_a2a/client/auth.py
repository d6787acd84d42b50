"""Credentials the client sends, and what it says when an agent refuses them.

``A2AClient(auth=...)`` takes a :class:`BearerToken`, an :class:`ApiKey`, a plain string (a
bearer token) or any ``httpx.Auth``. Every request (the card fetch included) carries it; push
webhooks are unaffected (the server's deliveries have their own authentication).

On HTTP 401/403 the client raises :class:`~scoped_a2a.protocol.errors.Unauthenticated` /
:class:`~scoped_a2a.protocol.errors.PermissionDenied` whose message names the schemes the card
declares (and whether a credential was sent at all), so the caller knows what to supply.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

import httpx
import msgspec

from .card import AgentCard


class BearerToken(httpx.Auth):
    """``Authorization: Bearer TOKEN`` on every request (a JWT or an API key)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the bearer token is empty")
        self._value = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._value
        yield request

    def __repr__(self) -> str:  # never the token itself
        return "BearerToken(...)"


class ApiKey(httpx.Auth):
    """An API key in a header (``X-API-Key`` by default) on every request."""

    def __init__(self, key: str, *, header: str = "X-API-Key") -> None:
        if not key:
            raise ValueError("the API key is empty")
        self._key, self.header = key, header

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers[self.header] = self._key
        yield request

    def __repr__(self) -> str:
        return f"ApiKey(header={self.header!r})"


Auth = httpx.Auth | BearerToken | ApiKey | str


def as_httpx_auth(auth: Auth | None) -> httpx.Auth | None:
    if auth is None or isinstance(auth, httpx.Auth):
        return auth
    return BearerToken(auth)


def _describe(name: str, scheme: Mapping[str, Any]) -> str:
    if "apiKeySecurityScheme" in scheme or scheme.get("type") == "apiKey":
        inner = scheme.get("apiKeySecurityScheme", scheme)
        where = inner.get("location", inner.get("in", "header"))
        return f"{name} (an API key in the {inner.get('name', '?')} {where})"
    if "httpAuthSecurityScheme" in scheme or scheme.get("type") == "http":
        inner = scheme.get("httpAuthSecurityScheme", scheme)
        fmt = inner.get("bearerFormat")
        return f"{name} ({inner.get('scheme', 'Bearer')} token{', ' + fmt if fmt else ''})"
    if "mtlsSecurityScheme" in scheme or scheme.get("type") == "mutualTLS":
        return f"{name} (a client certificate: mutual TLS)"
    if "oauth2SecurityScheme" in scheme or scheme.get("type") == "oauth2":
        return f"{name} (an OAuth 2.0 access token)"
    if "openIdConnectSecurityScheme" in scheme or scheme.get("type") == "openIdConnect":
        return f"{name} (an OpenID Connect token)"
    return name


REFUSAL_SEPARATOR = "; "
"""Between the server's standard 401 text and what it says was wrong with the credential sent
(only said for a credential that could be read but not used, such as a client certificate that
names no caller)."""


def refusal_reason(body: bytes) -> str | None:
    """What a 401's body says was wrong with the credential sent, if it says (JSON-RPC error or
    ``google.rpc.Status``); None for the standard text alone or a body that is not JSON."""
    try:
        decoded = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or REFUSAL_SEPARATOR not in message:
        return None
    reason = message.split(REFUSAL_SEPARATOR, 1)[1].strip()
    return reason[:500] or None


def missing_credential_text(card: AgentCard | None, *, sent: bool, status: int,
                            reason: str | None = None) -> str:
    """What to tell a caller the agent refused: which credentials its card asks for, or what
    the agent said was wrong with the credential sent (``reason``)."""
    schemes = (card.security_schemes or {}) if card is not None else {}
    wanted = ", ".join(_describe(n, s) for n, s in schemes.items() if isinstance(s, Mapping))
    if status == 403:
        return ("the agent refused this credential (HTTP 403): it is valid but not allowed; "
                "ask the agent's operator for access")
    if reason is not None:
        return f"the agent refused the credential sent (HTTP 401): {reason}"
    if not sent:
        head = "the agent needs a credential and none was sent (HTTP 401)"
    else:
        head = "the agent refused the credential sent (HTTP 401): wrong, expired or revoked"
    need = f"; its card accepts: {wanted}" if wanted else ""
    return (f"{head}{need}; pass A2AClient(auth=...), or on the command line --token or "
            "--api-key ($SCOPED_A2A_TOKEN, $SCOPED_A2A_API_KEY)")
