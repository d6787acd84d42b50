"""Authentication: who is calling, resolved once per HTTP request before routing.

An *authenticator* is any ``async (scope) -> Principal`` callable (the ASGI scope in; a
:class:`~scoped_a2a.Principal` out). It raises :class:`~scoped_a2a.protocol.errors.Unauthenticated`
for no or bad credentials (HTTP 401) and :class:`~scoped_a2a.protocol.errors.PermissionDenied` for
a valid caller who may not call (HTTP 403). The built-in schemes (:mod:`.api_keys`,
:mod:`.bearer_jwt`) are combined by :class:`Authenticator`, which also declares them on the
agent card.

:func:`resolve_principal` is the one entry point every binding calls (JSON-RPC here, HTTP+JSON
in its own module): it turns whatever an authenticator raises into one of those two errors, or
:class:`~scoped_a2a.protocol.errors.ServerUnavailable` when the authenticator itself failed (a
JWKS endpoint down), and never lets an exception's text reach the caller.

Cancellation: resolving is part of the request; a hang-up cancels it like any other await.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from ...protocol.errors import (
    A2AError,
    PermissionDenied,
    ServerUnavailable,
    Unauthenticated,
)
from ...protocol.jsonrpc import error_frame
from ...protocol.principal import ANONYMOUS, TENANT_SEPARATOR, Principal
from ...runtime.failures import new_error_id
from ..asgi import Scope, header

log = logging.getLogger("scoped_a2a.auth")

Authenticate = Callable[[Scope], Awaitable[Principal]]
"""The hook ``A2AApp(authenticate=...)`` takes."""

UNAUTHENTICATED_TEXT = (
    "authentication required: send a valid credential for one of the agent card's "
    "securitySchemes"
)
FORBIDDEN_TEXT = "this credential is not allowed to call this agent"


class CredentialUnusable(Unauthenticated):
    """A credential was sent and is genuine, but cannot name a caller (e.g. a client
    certificate from the trusted CA whose subject has no commonName).

    Unlike other refusals, ``public`` is sent to the caller: it only describes the credential
    the caller holds, and without it they would be told none was sent. Still HTTP 401.
    """

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public if public is not None else message


class Scheme(Protocol):
    """One way to present a credential (API key, JWT bearer, ...)."""

    name: str
    """Its key in the card's ``securitySchemes``."""
    challenge: str
    """Its ``WWW-Authenticate`` challenge (RFC 9110), e.g. ``Bearer realm="a2a"``."""

    async def authenticate(self, scope: Scope) -> Principal | None:
        """The principal, or None when the request carries no credential of this kind.

        Raises Unauthenticated when one is present but does not verify (the text is logged,
        never sent), PermissionDenied when it verifies but may not call.
        """
        ...

    def card_scheme(self) -> dict[str, Any]:
        """Its card entry, in the 1.0 shape and the 0.3 (OpenAPI) shape merged in one object."""
        ...


class Authenticator:
    """Accepts a request that any of ``schemes`` accepts; declares them all on the card.

    Schemes are tried in order: the first principal wins. A credential one scheme refuses may
    still be another's (an opaque API key and a JWT both travel as ``Bearer``), so a refusal
    only counts when no scheme accepts. PermissionDenied from a scheme ends the search.
    """

    def __init__(self, schemes: Sequence[Scheme]) -> None:
        if not schemes:
            raise ValueError("an Authenticator needs at least one scheme")
        self.schemes = list(schemes)

    async def __call__(self, scope: Scope) -> Principal:
        refusals: list[str] = []
        # What the caller may see of the first unusable credential, not the exception itself:
        # one kept past its except block forms a reference cycle with this frame on Python
        # 3.12+ (docs/design.md, "Facts about the stack"), left to the cyclic collector.
        unusable: str | None = None
        for scheme in self.schemes:
            try:
                principal = await scheme.authenticate(scope)
            except Unauthenticated as exc:
                refusals.append(f"{scheme.name}: {exc.message}")
                if isinstance(exc, CredentialUnusable) and unusable is None:
                    unusable = exc.public
                continue
            if principal is not None:
                return principal
        # Every scheme's reason goes to the log; the caller sees the fixed text, plus what is
        # wrong with a credential it sent that could not be used (CredentialUnusable).
        text = "; ".join(refusals) or "no credential"
        if unusable is not None:
            raise CredentialUnusable(text, public=unusable)
        raise Unauthenticated(text)

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value of a 401: each scheme's challenge, once."""
        return ", ".join(dict.fromkeys(s.challenge for s in self.schemes if s.challenge))

    def security_schemes(self) -> dict[str, Any]:
        """The card's ``securitySchemes``: each scheme's entry by its name."""
        return {s.name: s.card_scheme() for s in self.schemes}

    def reload(self) -> None:
        """Re-read every scheme's key material now (``serve`` calls this on SIGHUP)."""
        for s in self.schemes:
            reload = getattr(s, "reload", None)
            if reload is not None:
                reload()


def card_security(authenticate: Authenticate | None) -> dict[str, Any]:
    """The card fields declaring ``authenticate``'s schemes (none for a custom hook).

    1.0 reads ``securitySchemes`` + ``securityRequirements`` (any one scheme suffices: one
    requirement per scheme); 0.3 reads the same ``securitySchemes`` (each entry carries both
    shapes) and ``security``.
    """
    schemes_of = getattr(authenticate, "security_schemes", None)
    if schemes_of is None:
        return {}
    schemes: Mapping[str, Any] = schemes_of()
    return {
        "securitySchemes": dict(schemes),
        "securityRequirements": [{"schemes": {name: {"list": []}}} for name in schemes],
        "security": [{name: []} for name in schemes],
    }


def challenge_of(authenticate: Authenticate | None) -> str:
    return str(getattr(authenticate, "challenge", "") or 'Bearer realm="a2a"')


async def resolve_principal(authenticate: Authenticate | None, scope: Scope) -> Principal:
    """Who sent this request: :data:`~scoped_a2a.protocol.principal.ANONYMOUS` without an
    authenticator, else what it returns.

    Raises Unauthenticated / PermissionDenied with the fixed public text (the authenticator's
    own text is logged with the client's address, never the credential); ServerUnavailable
    with an error id when the authenticator itself failed. Every binding calls this once per
    request, before routing.
    """
    if authenticate is None:
        return ANONYMOUS
    client = scope.get("client") or ("?", 0)
    try:
        principal = await authenticate(scope)
        if not isinstance(principal, Principal) or not principal.id:
            raise Unauthenticated("the authenticator returned no principal id")
        if TENANT_SEPARATOR in principal.id:  # it would alias another principal's tenant
            raise Unauthenticated("a principal id with a control character")
        return principal
    except Unauthenticated as exc:
        log.warning("authentication failed from %s: %s", client[0], exc.message)
        if isinstance(exc, CredentialUnusable):
            raise Unauthenticated(f"{UNAUTHENTICATED_TEXT}; {exc.public}") from None
        raise Unauthenticated(UNAUTHENTICATED_TEXT) from None
    except PermissionDenied as exc:
        log.warning("permission denied from %s: %s", client[0], exc.message)
        raise PermissionDenied(FORBIDDEN_TEXT) from None
    except A2AError:
        raise
    except Exception:
        error_id = new_error_id()
        log.exception("the authenticator failed (error id %s)", error_id)
        raise ServerUnavailable(
            f"authentication is unavailable now; try again (error id {error_id})") from None


def auth_error_response(
    exc: Unauthenticated | PermissionDenied, scope: Scope, challenge: str
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The JSON-RPC binding's answer to a refused request: status, headers, body.

    401 carries ``WWW-Authenticate``; the body is a JSON-RPC error with id null (the request
    was not read) and the 1.0 ErrorInfo data when the caller speaks 1.0.
    """
    v1 = (header(scope, b"a2a-version") or "").startswith("1")
    headers: list[tuple[bytes, bytes]] = [(b"cache-control", b"no-store")]
    if exc.status == 401:
        headers.append((b"www-authenticate", challenge.encode("latin-1", "replace")))
    return exc.status, headers, error_frame(b"null", exc, v1=v1)


__all__ = [
    "Authenticate",
    "Authenticator",
    "CredentialUnusable",
    "PermissionDenied",
    "Principal",
    "Scheme",
    "Unauthenticated",
    "auth_error_response",
    "card_security",
    "resolve_principal",
]
