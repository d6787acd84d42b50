"""Who is looking at the console, what they may see, and which writes to accept.

Credentials. A script sends the same credential as to the A2A endpoint (``Authorization:
Bearer``, ``X-API-Key``, a client certificate). A browser cannot put a header on a page load or
an ``EventSource``, so the page posts the credential once to ``/console/api/login``; the server
checks it with the app's own authenticator and answers with a session cookie (random, 256 bits,
``HttpOnly``, ``SameSite=Strict``, ``Path`` the console's, ``Secure`` over HTTPS). The session
keeps the credential in this process's memory and every request authenticates it again, so a
key removed from the key file or a JWT that expires ends the session at its next request (and
the session is dropped, credential and all). Open live feeds re-check it every few seconds, and
end at once when their session ends (logout).

Seeing. An operator (a principal id in ``operators``, or a JWT carrying ``operator_scope``)
sees every owner's runs; anyone else sees the runs their principal owns; both only in the
tenants the principal may use (a JWT's tenants claim).
Without an authenticator every caller is the anonymous principal, which owns every task, so the
console shows everything (as the A2A methods do).

Writes (login, logout, cancel) must come from the console's own page: a custom header
(``X-Console-Request``, which a cross-site form cannot send and a cross-site ``fetch`` cannot
send without a CORS preflight this server never grants), an ``Origin`` equal to the server's
own, and, when the browser sends it, ``Sec-Fetch-Site: same-origin``.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from ...protocol.errors import PermissionDenied, Unauthenticated
from ...protocol.principal import ANONYMOUS, Principal
from ..asgi import Scope, header
from ..auth import Authenticate, resolve_principal
from .hub import split_owner

COOKIE = "scoped_a2a_console"
WRITE_HEADER = b"x-console-request"
SESSION_SECONDS = 8 * 3600.0
"""How long a console session lasts from its login."""
MAX_SESSIONS = 1000
"""Sessions kept at once (the oldest is dropped first)."""
SESSIONS_PER_PRINCIPAL = 16
"""Sessions one principal may hold (its oldest is dropped first): logging in again and again
with one credential cannot push everyone else's sessions out of the table."""


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """``serve --console``'s settings: who counts as an operator (sees every run).

    ``operators``: principal ids. ``operator_scope``: a JWT scope (in ``scope`` or ``scp``)
    that makes its bearer an operator.
    """

    operators: frozenset[str] = frozenset()
    operator_scope: str | None = None


@dataclass(frozen=True, slots=True)
class Viewer:
    """The principal looking at the console, and whether it sees every run."""

    principal: Principal
    operator: bool
    session: str | None = None  # the session token, when it came from the cookie

    @property
    def name(self) -> str:
        return self.principal.id or "anonymous"

    def sees(self, owner: str) -> bool:
        """Whether this viewer may see a task owned by the owner key ``owner``: its own, or
        any owner's for an operator; either way only in the tenants its principal may use (a
        multi-tenant issuer may name a principal in another tenant like the operator)."""
        principal, tenant = split_owner(owner)
        if not self.operator and principal != self.principal.id:
            return False
        tenants = self.principal.tenants
        return tenants is None or tenant in tenants


@dataclass(slots=True)
class _Session:
    credential: str
    principal: str  # its principal id (a cap per principal keeps others' sessions alive)
    expires: float  # time.monotonic()
    ended: anyio.Event | None = None  # made by the first feed that waits for its end


class Sessions:
    """Console sessions: token -> credential and expiry, in memory, bounded.

    A session ends at logout, at its expiry, when its credential is refused on a re-check,
    when its principal logs in a SESSIONS_PER_PRINCIPAL-th time more, or when the table is
    full (the oldest goes first); then :meth:`wait_ended` returns, so the
    feeds it has open end at once.
    """

    def __init__(self, *, seconds: float = SESSION_SECONDS, limit: int | None = None) -> None:
        self.seconds = seconds
        self.limit = MAX_SESSIONS if limit is None else limit
        self._by_token: OrderedDict[str, _Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_token)

    def __contains__(self, token: object) -> bool:
        return token in self._by_token

    def create(self, credential: str, principal: str) -> str:
        token = secrets.token_urlsafe(32)
        self._by_token[token] = _Session(credential, principal,
                                         time.monotonic() + self.seconds)
        own = [t for t, session in self._by_token.items() if session.principal == principal]
        for old in own[:-SESSIONS_PER_PRINCIPAL]:  # oldest first (a login is rare: a scan is fine)
            self.drop(old)
        while len(self._by_token) > self.limit:
            self.drop(next(iter(self._by_token)))
        return token

    def credential(self, token: str) -> str | None:
        found = self._by_token.get(token)
        if found is None:
            return None
        if time.monotonic() >= found.expires:
            self.drop(token)
            return None
        return found.credential

    def drop(self, token: str) -> None:
        session = self._by_token.pop(token, None)
        if session is not None and session.ended is not None:
            session.ended.set()

    async def wait_ended(self, token: str) -> None:
        """Return once session ``token`` has ended (at once if it has already).
        Cancellation ends the wait at once."""
        session = self._by_token.get(token)
        if session is None:
            return
        if session.ended is None:
            session.ended = anyio.Event()
        await session.ended.wait()


class Access:
    """Resolves viewers and checks writes for one console."""

    def __init__(self, authenticate: Authenticate | None, settings: ConsoleSettings,
                 public_url: str | None) -> None:
        self.authenticate = authenticate
        self.settings = settings
        self.sessions = Sessions()
        self._public_origin = _origin_of(public_url) if public_url else None
        self._public_host = (urlsplit(public_url).hostname or "") if public_url else None

    @property
    def https(self) -> bool:
        """The public URL is HTTPS: cookies are ``Secure`` even when TLS ends at a proxy."""
        return self._public_origin is not None and self._public_origin.startswith("https://")

    @property
    def auth_on(self) -> bool:
        return self.authenticate is not None

    async def viewer(self, scope: Scope) -> Viewer:
        """Who sent this request: from its session cookie, else its own credential.

        Raises Unauthenticated (no or bad credential, an expired session) or PermissionDenied,
        with the fixed public texts of :func:`~scoped_a2a.server.auth.resolve_principal`.
        """
        if self.authenticate is None:
            return Viewer(ANONYMOUS, operator=True)
        token = cookie(scope, COOKIE)
        credential = self.sessions.credential(token) if token else None
        if token is not None and credential is not None:
            try:
                principal = await self.check(scope, credential)
            except (Unauthenticated, PermissionDenied):
                self.sessions.drop(token)  # a refused credential is not kept in memory
                raise
            return Viewer(principal, self._operator(principal), token)
        principal = await resolve_principal(self.authenticate, scope)
        return Viewer(principal, self._operator(principal))

    async def check(self, scope: Scope, credential: str) -> Principal:
        """The principal ``credential`` names, checked by the app's authenticator as if it
        came as ``Authorization: Bearer`` on this request (raises as :meth:`viewer`)."""
        if not credential or any(c in credential for c in "\r\n\x00") or len(credential) > 16384:
            raise Unauthenticated("a console credential that cannot be a header value")
        headers = [(k, v) for k, v in scope.get("headers", ())
                   if k not in (b"authorization", b"x-api-key", b"cookie")]
        headers.append((b"authorization", b"Bearer " + credential.encode("latin-1", "replace")))
        return await resolve_principal(self.authenticate, {**scope, "headers": headers})

    def _operator(self, principal: Principal) -> bool:
        if principal.id in self.settings.operators:
            return True
        wanted = self.settings.operator_scope
        if wanted is None:
            return False
        return wanted in _scopes(principal.claims.get("scope"), principal.claims.get("scp"))

    def check_host(self, scope: Scope) -> None:
        """Without authentication, refuse (PermissionDenied) a request whose ``Host`` is a DNS
        name other than ``localhost`` or the public URL's host.

        Why: every caller is then an operator, and a page on another site whose DNS name is
        made to point at this server (DNS rebinding) is same-origin with it in the browser's
        eyes. Such a request names the attacker's host; an IP address or ``localhost`` cannot
        be rebound. With authentication on, a rebound page has no credential to use.
        """
        if self.authenticate is not None:
            return
        host = (header(scope, b"host") or "").strip().lower()
        if not host or host.startswith("["):  # no Host (HTTP/1.0), or an IPv6 literal
            return
        name = host.rsplit(":", 1)[0].rstrip(".")
        if name == "localhost" or name.endswith(".localhost") or name == self._public_host:
            return
        try:
            ipaddress.ip_address(name)
        except ValueError:
            raise PermissionDenied(
                "this console has no authentication, so it answers only requests to an IP "
                "address or localhost (or --public-url's host) in their Host header") from None

    def check_write(self, scope: Scope) -> None:
        """Refuse (PermissionDenied) a write that may come from another site; see the module
        docstring for the three checks."""
        if header(scope, WRITE_HEADER) != "1":
            raise PermissionDenied(
                "console writes need the header X-Console-Request: 1 (the console page sends it)")
        site = header(scope, b"sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise PermissionDenied("console writes must come from the console's own page")
        origin = header(scope, b"origin")
        if origin is None:
            if cookie(scope, COOKIE):  # every browser sends Origin with a POST
                raise PermissionDenied("a console write with a session cookie needs an Origin")
            return
        if origin.rstrip("/").lower() not in self._own_origins(scope):
            raise PermissionDenied("console writes must come from the console's own origin")

    def _own_origins(self, scope: Scope) -> set[str]:
        origins = set()
        if self._public_origin is not None:
            origins.add(self._public_origin)
        host = header(scope, b"host")
        if host:
            origins.add(f"{scope.get('scheme', 'http')}://{host}".lower())
        return origins


def cookie(scope: Scope, name: str) -> str | None:
    """The value of cookie ``name`` on the request, if any."""
    raw = header(scope, b"cookie")
    if not raw:
        return None
    for pair in raw.split(";"):
        key, _, value = pair.strip().partition("=")
        if key == name and value:
            return value
    return None


def session_cookie(scope: Scope, token: str, *, seconds: float, https: bool = False) -> bytes:
    """The ``Set-Cookie`` value of a session (``seconds`` 0: delete it). ``Secure`` over HTTPS,
    and with ``https`` (the public URL is HTTPS: a proxy in front ends TLS)."""
    path = (str(scope.get("root_path") or "").rstrip("/") + "/console") or "/console"
    secure = "; Secure" if https or scope.get("scheme") == "https" else ""
    return (f"{COOKIE}={token}; Path={path}; Max-Age={int(seconds)}; HttpOnly; "
            f"SameSite=Strict{secure}").encode()


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _scopes(*values: object) -> Iterable[str]:
    for value in values:
        if isinstance(value, str):
            yield from value.split()
        elif isinstance(value, list):
            yield from (str(v) for v in value)
