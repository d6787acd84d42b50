"""How :class:`~.client.A2AClient` reaches its agent: the agent card, and the binding, protocol
version and transport chosen from it (JSON-RPC 1.0 or 0.3, HTTP+JSON, or gRPC).

:class:`AgentConnection` holds what every call needs and nothing about the A2A methods
themselves (those are :class:`~.client.A2AClient`'s): the httpx client (owned or lent), the
card (fetched on first use, refetched on ``card(refresh=True)``), the transport and codec picked
from it (see :mod:`.card`), and the one gRPC connection, kept across card refreshes.

Cancellation: a card fetch or a transport choice cancelled midway leaves nothing behind (the
choice is made again on the next call). Errors: a card that cannot be fetched raises
:class:`~.errors.TransportError` subclasses; one offering nothing this client speaks raises
``VersionNotSupported`` naming what it offers.
"""

from __future__ import annotations

import functools
import importlib.util
import ssl
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import httpx

from ..protocol.errors import VersionNotSupported
from ..timeouts import fail_after
from .auth import Auth, as_httpx_auth, missing_credential_text, refusal_reason
from .card import AgentCard, select_binding, select_interface
from .card_fetch import fetch_card
from .card_verify import CardVerifier
from .rest import RestTransport
from .rpc import RpcTransport, transport_error
from .streams import EventSource, EventStream
from .wire import CODECS, Codec

if TYPE_CHECKING:  # imported when used: it needs protobuf (the [grpc] extra)
    from .grpc import GrpcTransport

CARD_PATH = "/.well-known/agent-card.json"


def grpc_available() -> bool:
    """Whether this client can speak gRPC: protobuf (the ``[grpc]`` extra) is installed."""
    try:
        return importlib.util.find_spec("google.protobuf") is not None
    except ModuleNotFoundError:  # no "google" package at all
        return False


def card_url(url: str) -> str:
    """Where the agent card of the agent at ``url`` lives."""
    if url.rstrip("/").endswith((".well-known/agent-card.json", ".well-known/agent.json")):
        return url
    return url.rstrip("/") + CARD_PATH


@functools.cache
def default_tls() -> ssl.SSLContext:
    """httpx's default trust (certifi's bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as set at
    first use), built once per process for the httpx clients this module creates.

    Why: httpx builds one per client, loading the CA bundle: ~50 ms of CPU in the event loop,
    whatever the URL's scheme. A Temporal worker starting 100 step activities at once spent 5 s
    of CPU on it before their first heartbeats, past a 5 s heartbeat timeout on a loaded
    machine. Shared only by clients that speak HTTP/1.1 alone (httpcore sets the context's ALPN
    to ``http/1.1`` on each connection: the same for all of them); gRPC builds its own.
    """
    return httpx.create_ssl_context()


class AgentConnection:
    """The card and the transport of one agent (``A2AClient``'s parameters of the same names;
    see :class:`~.client.A2AClient`)."""

    def __init__(
        self,
        url: str,
        *,
        http: httpx.AsyncClient | None = None,
        card: AgentCard | None = None,
        version: str | None = None,
        rpc_url: str | None = None,
        timeout: float | None = 30.0,
        stream_idle_timeout: float | None = None,
        extensions: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        transport: str | None = None,
        auth: Auth | None = None,
        verify_card: CardVerifier | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if version not in (None, "1.0", "0.3"):
            raise ValueError("version must be '1.0', '0.3' or None")
        if transport not in (None, "jsonrpc", "rest", "grpc"):
            raise ValueError("transport must be 'jsonrpc', 'rest', 'grpc' or None")
        if transport == "grpc" and not grpc_available():
            raise ValueError("transport='grpc' needs protobuf: pip install 'scoped-a2a[grpc]'")
        self._ssl_context = ssl_context
        self._grpc: GrpcTransport | None = None  # kept across card refreshes: one connection
        self._retired: list[GrpcTransport] = []  # replaced by a card refresh; closed at aclose
        self._binding = transport
        self.url = url
        self._owns_http = http is None
        self.http = http if http is not None else httpx.AsyncClient(
            timeout=None, verify=default_tls())
        self._card = card
        self._want = version
        self._rpc_url = rpc_url
        self.timeout = timeout
        self.stream_idle_timeout = stream_idle_timeout
        self._extensions = tuple(extensions)
        self._headers = dict(headers or {})
        self._auth = as_httpx_auth(auth)
        self._verify_card = verify_card
        self._transport: RpcTransport | RestTransport | GrpcTransport | None = None
        self._codec: Codec | None = None

    async def aclose(self) -> None:
        """Close the gRPC connection, if any, and the httpx client if this client created
        it."""
        retired, self._retired = self._retired, []
        if self._grpc is not None:
            retired.append(self._grpc)
            self._grpc = None
        for grpc in retired:
            await grpc.aclose()
        if self._owns_http:
            await self.http.aclose()

    # --- the card and the interface --------------------------------------------------------

    async def card(self, *, refresh: bool = False) -> AgentCard:
        """The agent card (fetched once, then cached; ``refresh`` fetches it again)."""
        if self._card is None or refresh:
            self._card = await self._fetch_card()
            self._transport = None
        return self._card

    async def _fetch_card(self) -> AgentCard:
        where = card_url(self.url)
        try:
            with fail_after(self.timeout):
                return await fetch_card(self.http, where, headers=self._headers,
                                        auth=self._auth, verify=self._verify_card)
        except TimeoutError as exc:
            raise transport_error(exc, where) from None

    async def _rpc(self) -> tuple[RpcTransport | RestTransport | GrpcTransport, Codec]:
        if self._transport is None or self._codec is None:
            card = await self.card()
            speaks = ("jsonrpc", "rest", "grpc") if grpc_available() else ("jsonrpc", "rest")
            binding, other_url = select_binding(card, transport=self._binding, want=self._want,
                                                speaks=speaks)
            rpc: RpcTransport | None = None
            try:
                url, version = select_interface(card, want=self._want)
            except VersionNotSupported:
                if binding == "jsonrpc":
                    raise
            else:
                rpc = RpcTransport(
                    self.http, self._rpc_url or url, version, timeout=self.timeout,
                    extensions=self._extensions, headers=self._headers, auth=self._auth,
                    on_refused=self._refused_text,
                )
            # JSON-RPC stays the way to methods REST and gRPC have no route for (trajectory
            # reads).
            fallback = rpc if rpc is not None and rpc.version == "1.0" else None
            if binding == "rest" and other_url is not None:
                self._codec = CODECS["1.0"]
                self._transport = RestTransport(
                    self.http, other_url, timeout=self.timeout, extensions=self._extensions,
                    headers=self._headers, auth=self._auth, on_refused=self._refused_text,
                    fallback=fallback,
                )
            elif binding == "grpc" and other_url is not None:
                self._codec = CODECS["1.0"]
                self._transport = self._grpc_transport(other_url, fallback)
            else:
                assert rpc is not None
                self._codec = CODECS[rpc.version]
                self._transport = rpc
        return self._transport, self._codec

    def _grpc_transport(self, url: str, fallback: RpcTransport | None) -> GrpcTransport:
        """The gRPC transport for the card's ``url``: the one this client has when the URL
        is the same (its connection stays), else a new one (the old one's calls go on)."""
        from .grpc import GrpcTransport

        if self._grpc is None or self._grpc.url != url:
            if self._grpc is not None:  # a refreshed card moved it: closed with the client
                self._retired.append(self._grpc)
            self._grpc = GrpcTransport(
                url, base_url=self.url, timeout=self.timeout, extensions=self._extensions,
                headers=self._headers, auth=self._auth or self.http.auth,
                on_refused=self._refused_text, fallback=fallback,
                ssl_context=self._ssl_context)
        self._grpc.fallback = fallback
        return self._grpc

    async def binding(self) -> str:
        """The binding this client calls the agent over: ``"jsonrpc"``, ``"rest"`` or
        ``"grpc"``."""
        transport = (await self._rpc())[0]
        if transport is self._grpc:
            return "grpc"
        return "rest" if isinstance(transport, RestTransport) else "jsonrpc"

    def _events(self, response: object,
                transport: RpcTransport | RestTransport | GrpcTransport,
                codec: Codec) -> EventStream:
        # ``response``: what the transport's stream handed out (an SSE response, or a gRPC
        # call's event source); typed loosely as the transports' context managers differ.
        unwrap = transport.unwrap if isinstance(transport, RestTransport) else None
        return EventStream(cast("httpx.Response | EventSource", response), codec,
                           idle_timeout=self.stream_idle_timeout, unwrap=unwrap)

    def _refused_text(self, status: int, body: bytes) -> str:
        sent = (self._auth is not None or self.http.auth is not None
                or any(k.lower() in ("authorization", "x-api-key") for k in self._headers))
        return missing_credential_text(self._card, sent=sent, status=status,
                                       reason=refusal_reason(body))

    async def version(self) -> str:
        """The protocol version this client speaks to the agent (``"1.0"`` or ``"0.3"``)."""
        return (await self._rpc())[1].version

    async def offers_trajectory(self) -> bool:
        """True when the agent's card advertises this project's trajectory extension and this
        client can reach it (its JSON-RPC method: not over a gRPC-only card)."""
        if not (await self.card()).offers_trajectory:
            return False
        transport = (await self._rpc())[0]
        return transport is not self._grpc or self._grpc.fallback is not None


__all__ = ["CARD_PATH", "AgentConnection", "card_url", "grpc_available"]
