"""TLS for ``serve`` (hypercorn's), and the client-certificate (mTLS) scheme.

:func:`configure_tls` sets hypercorn's certificate and key and, with ``ca_certs``, optional
client certificates: a client may present one (it must then verify against ``ca_certs``, or the
handshake fails) or none (another scheme, e.g. API keys, may still accept the request).

hypercorn does not put the client certificate in the ASGI scope, so with ``ca_certs``
:func:`configure_tls` installs thin subclasses of hypercorn's per-connection ``TCPServer`` (both
workers) that record each verified peer certificate under the connection's peer address while
the connection lives; :class:`ClientCertificate` finds it from ``scope["client"]``. The
subclasses change nothing else. Cancellation: the record is removed when the connection ends,
however it ends.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from hypercorn.config import Config
from hypercorn.utils import parse_socket_addr

from ..protocol.principal import Principal
from ..timeouts import fail_after
from .asgi import Scope
from .auth import CredentialUnusable

log = logging.getLogger("scoped_a2a.tls")

_PEERS: dict[Any, dict[str, Any]] = {}
"""Verified client certificates (``getpeercert()``) by the connection's peer address."""


def configure_tls(config: Config, *, certfile: str, keyfile: str,
                  ca_certs: str | None = None) -> None:
    """Serve TLS with ``certfile``/``keyfile``; with ``ca_certs``, ask for client certificates.

    Raises ValueError naming the file when the certificate, key or CA cannot be loaded.
    """
    config.certfile, config.keyfile = certfile, keyfile
    if ca_certs is not None:
        config.ca_certs = ca_certs
        config.verify_mode = ssl.CERT_OPTIONAL
        _install_peer_recording()
    try:
        config.create_ssl_context()  # load now: a bad file is a start-up error, not a hang
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot use the TLS files ({certfile}, {keyfile}"
                         f"{', ' + ca_certs if ca_certs else ''}): {exc}") from None


def _install_peer_recording() -> None:
    import hypercorn.asyncio.run as asyncio_run
    import hypercorn.asyncio.tcp_server as asyncio_tcp
    import hypercorn.trio.run as trio_run
    import hypercorn.trio.tcp_server as trio_tcp

    if getattr(trio_run, "TCPServer", None) is not trio_tcp.TCPServer:  # installed already
        return

    class TrioTCPServer(trio_tcp.TCPServer):
        _scoped_a2a_peers = True

        async def run(self) -> None:
            import trio

            key = None
            stream: Any = self.stream
            if isinstance(stream, trio.SSLStream):
                try:
                    with fail_after(self.config.ssl_handshake_timeout):
                        await stream.do_handshake()
                    key = _remember(stream.getpeercert(), stream.transport_stream.socket)
                except (trio.BrokenResourceError, TimeoutError):
                    pass  # hypercorn's run() meets the same failure and gives up quietly
            try:
                await super().run()
            finally:
                _PEERS.pop(key, None)

    class AsyncioTCPServer(asyncio_tcp.TCPServer):
        _scoped_a2a_peers = True

        async def run(self) -> None:
            ssl_object = self.writer.get_extra_info("ssl_object")
            key = None
            if ssl_object is not None:
                key = _remember(ssl_object.getpeercert(), self.writer.get_extra_info("socket"))
            try:
                await super().run()
            finally:
                _PEERS.pop(key, None)

    trio_run.TCPServer = TrioTCPServer  # type: ignore[attr-defined]
    asyncio_run.TCPServer = AsyncioTCPServer  # type: ignore[attr-defined]


def _remember(cert: dict[str, Any] | None, sock: Any) -> Any:
    if not cert:
        return None
    key = parse_socket_addr(sock.family, sock.getpeername())
    _PEERS[key] = cert
    return key


def _name(rdns: Any) -> dict[str, str]:
    return {k: v for rdn in rdns or () for k, v in rdn}


class ClientCertificate:
    """The mTLS scheme: the principal is the verified client certificate's subject.

    The id is the subject's commonName (``id_field``); claims hold the subject, the issuer and
    the serial number. No certificate: not this scheme's request (None). Needs ``serve`` with
    ``ca_certs`` (the handshake has already verified the certificate against it).
    """

    challenge = ""

    def __init__(self, *, name: str = "mtls", id_field: str = "commonName") -> None:
        self.name = name
        self.id_field = id_field

    async def authenticate(self, scope: Scope) -> Principal | None:
        if scope.get("scheme") != "https":
            return None
        cert = _PEERS.get(tuple(scope["client"]) if scope.get("client") else None)
        if cert is None:
            return None
        subject = _name(cert.get("subject"))
        ident = subject.get(self.id_field)
        if not ident:
            shown = ", ".join(f"{k}={v}" for k, v in subject.items()) or "empty"
            raise CredentialUnusable(
                f"a client certificate without {self.id_field} (subject: {shown})",
                public=f"the client certificate sent was accepted by the TLS handshake but "
                       f"names no caller: its subject ({shown}) has no {self.id_field}; use a "
                       f"certificate whose subject has one")
        claims = {"subject": subject, "issuer": _name(cert.get("issuer")),
                  "serialNumber": cert.get("serialNumber")}
        return Principal(ident, claims, self.name)

    def card_scheme(self) -> dict[str, Any]:
        description = "A client certificate issued by the server's trusted CA (mutual TLS)"
        return {"mtlsSecurityScheme": {"description": description},
                "type": "mutualTLS", "description": description}
