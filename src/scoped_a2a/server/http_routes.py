"""Which handler answers an HTTP request to an :class:`~.app.A2AApp`, in this order: the public
card (and its JWKS), gRPC, the console (each with its own authentication), then the caller's
principal, resolved before any other route (an unauthenticated caller learns nothing about
paths or methods), then ``/metrics``, the HTTP+JSON routes, and JSON-RPC at the root. Every
other path is a 404 with the REST error body, a non-POST at the root a 405.

Also the path helpers: the mount's prefix (ASGI ``root_path``) and the request's path under it,
and :class:`InFlight`, which counts and observes each A2A request.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ..observe.base import Observer
from ..protocol.errors import MethodNotFound, PermissionDenied, ServerUnavailable, Unauthenticated
from ..protocol.jsonrpc import error_frame
from ..protocol.rest_errors import rest_error_body
from .asgi import Receive, Scope, Send, send_response
from .auth import Authenticate, auth_error_response, challenge_of, resolve_principal
from .body import discard_body
from .card_http import send_card
from .card_signing import JWKS_PATH, CardSigner
from .cards import CardPublisher
from .jsonrpc_binding import JsonRpcBinding
from .rest import RestBinding, answer_type, is_rest_path

if TYPE_CHECKING:
    from .console import Console

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
_encode = msgspec.json.Encoder().encode
_SLASHES = re.compile("/{2,}")


class Routed(Protocol):
    """What routing needs of the app (:class:`~.app.A2AApp`; a protocol, so this module does
    not import the app that imports it)."""

    cards: CardPublisher
    card_signer: CardSigner | None
    grpc: Any  # the gRPC binding (an extra), or None
    console: Console | None
    authenticate: Authenticate | None
    auth_failures: int
    observe: Observer
    rest: RestBinding
    jsonrpc: JsonRpcBinding
    open_requests: int


async def route(app: Routed, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer one HTTP request to ``app`` (the order: this module's docstring).

    Runs in the server's task for the request; cancelled (the server cut the connection), the
    handler it reached is cancelled with it. A refused or unknown request is answered here,
    its body read and dropped first; the bindings answer their own errors.
    """
    path, method = route_path(scope), scope.get("method", "GET")
    if path in CARD_PATHS:
        if method not in ("GET", "HEAD"):
            await discard_body(scope, receive)
            await plain(send, 405, "use GET for the agent card")
        else:
            # With an ETag and Last-Modified; 304 when the client holds this card.
            await send_card(scope, send, *app.cards.public(scope, root_path(scope)),
                            app.cards.built_at)
        return
    if path == JWKS_PATH and app.card_signer is not None and method in ("GET", "HEAD"):
        await send_response(send, 200, _encode(app.card_signer.jwks()),
                            headers=[(b"cache-control", b"max-age=300")])
        return
    if app.grpc is not None and app.grpc.accepts(scope):
        # gRPC answers every refusal (credentials included) with a status in trailers.
        with in_flight(app, scope):
            await app.grpc(scope, receive, send)
        return
    if app.console is not None and (path == "/console" or path.startswith("/console/")):
        await app.console(scope, receive, send, path)  # its own authentication
        return
    # Every route but the public card needs a principal, resolved before routing (so an
    # unauthenticated caller learns nothing about paths or methods either).
    try:
        principal = await resolve_principal(app.authenticate, scope)
    except (Unauthenticated, PermissionDenied) as exc:
        app.auth_failures += 1
        await discard_body(scope, receive)
        status, headers, body = auth_error_response(exc, scope,
                                                    challenge_of(app.authenticate))
        if is_rest_path(path):  # the same status and headers, the REST error body
            body = rest_error_body(exc)
        await send_response(send, status, body, headers=headers)
        return
    except ServerUnavailable as exc:
        await discard_body(scope, receive)
        body = rest_error_body(exc) if is_rest_path(path) else error_frame(b"null", exc,
                                                                             v1=True)
        await send_response(send, 503, body)
        return
    if path == "/metrics" and (page := app.observe.metrics_page()) is not None:
        # After authentication: with an authenticator, scrapers send a credential too.
        await discard_body(scope, receive)
        await send_response(send, 200, page[0], content_type=page[1].encode())
        return
    if is_rest_path(path):
        with in_flight(app, scope):
            await app.rest(scope, receive, send, path, principal)
        return
    if path not in ("/", ""):
        # The HTTP+JSON binding's error body (google.rpc.Status, docs/rest.md): a path that
        # is neither JSON-RPC's nor a REST route is most likely a REST client's mistake.
        await discard_body(scope, receive)
        root = root_path(scope)
        err = MethodNotFound(f"no such path {path!r}: A2A JSON-RPC is POSTed to {root}/, "
                             f"HTTP+JSON routes start with {root}/message: or {root}/tasks")
        await send_response(send, 404, rest_error_body(err),
                            content_type=answer_type(scope))
        return
    if method != "POST":
        await discard_body(scope, receive)
        await plain(send, 405,
                     f"A2A JSON-RPC requests are POSTed to {root_path(scope)}/")
        return
    with in_flight(app, scope):
        await app.jsonrpc(scope, receive, send, principal)


def in_flight(app: Routed, scope: Scope) -> InFlight:
    """Around one A2A request: counted in ``open_requests`` and observed (span, metrics)."""
    return InFlight(app, app.observe.request(scope))


class InFlight:
    """What :func:`in_flight` returns (a plain class: one per request)."""

    __slots__ = ("_app", "_observed")

    def __init__(self, app: Routed, observed: AbstractContextManager[None]) -> None:
        self._app, self._observed = app, observed

    def __enter__(self) -> None:
        self._app.open_requests += 1
        try:
            self._observed.__enter__()
        except BaseException:
            self._app.open_requests -= 1
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> bool | None:
        try:
            return self._observed.__exit__(exc_type, exc_val, exc_tb)
        finally:
            self._app.open_requests -= 1


async def plain(send: Send, status: int, text: str) -> None:
    """A small JSON error answer: ``{"error": text}``."""
    await send_response(send, status, _encode({"error": text}))


def root_path(scope: Scope) -> str:
    """The prefix the app is mounted at (ASGI ``root_path``), without a trailing slash."""
    return str(scope.get("root_path") or "").rstrip("/")


def route_path(scope: Scope) -> str:
    """The request's path relative to the mount point.

    Servers and frameworks disagree on whether ``path`` includes ``root_path``: Starlette's
    ``Mount`` (and uvicorn's ``--root-path``) keep the full path, the ASGI spec's older reading
    strips it. A path that starts with the root path is taken as full, otherwise as relative.
    """
    path = str(scope.get("path") or "/")
    if path[:1] != "/" and path[:8].lower().startswith(("http://", "https://")):
        # The absolute-form (``GET http://host/path``: a client set up for a proxy), which a
        # server must accept (RFC 9112 3.2.2); hypercorn passes the target as the path.
        parts = path.split("/", 3)
        path = "/" + parts[3] if len(parts) == 4 else "/"
    root = root_path(scope)
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    if "//" in path:
        # Clients that join f"{card_url}/message:send" to a card URL ending in "/" ask for
        # "//message:send": empty segments mean nothing to any route, so they are dropped.
        path = _SLASHES.sub("/", path)
    return path or "/"
