"""The agent card as the client reads it, and the choice of interface and protocol version.

The card is decoded leniently (unknown fields are ignored) because agents add their own. The
interface is chosen as the official SDK chooses it: among the JSON-RPC interfaces of
``supportedInterfaces``, 1.0 is preferred, then 0.3; an interface without a version counts as
1.0. A legacy card (no ``supportedInterfaces``) is read from its top-level ``url`` and
``protocolVersion`` (absent: 0.3).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec

from ..protocol.errors import VersionNotSupported
from ..protocol.trajectory import TRAJECTORY_EXTENSION_URI
from ..protocol.types import Wire


class AgentInterface(Wire):
    url: str
    protocol_binding: str = "JSONRPC"
    protocol_version: str | None = None
    tenant: str | None = None


class AgentExtension(Wire):
    uri: str
    description: str | None = None
    required: bool = False
    params: dict[str, Any] | None = None


class AgentCapabilities(Wire):
    streaming: bool | None = None
    push_notifications: bool | None = None
    extensions: list[AgentExtension] | None = None
    extended_agent_card: bool | None = None


class AgentCard(Wire):
    """The fields of an agent card this client uses; the rest is ignored on decoding."""

    name: str = ""
    description: str = ""
    version: str = ""
    supported_interfaces: list[AgentInterface] | None = None
    capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    skills: list[dict[str, Any]] | None = None
    default_input_modes: list[str] | None = None
    default_output_modes: list[str] | None = None
    security_schemes: dict[str, Any] | None = None
    # 0.3 (legacy) top-level fields
    url: str | None = None
    preferred_transport: str | None = None
    protocol_version: str | None = None

    @property
    def streaming(self) -> bool:
        return bool(self.capabilities.streaming)

    def offers_extension(self, uri: str) -> bool:
        return any(e.uri == uri for e in self.capabilities.extensions or ())

    @property
    def offers_trajectory(self) -> bool:
        """True when the agent serves this project's cursor read of a task's trajectory."""
        return self.offers_extension(TRAJECTORY_EXTENSION_URI)


_card_decoder = msgspec.json.Decoder(AgentCard)


def decode_card(body: bytes) -> AgentCard:
    """Decode a card; raises ``msgspec.DecodeError``/``ValidationError`` on a malformed one."""
    return _card_decoder.decode(body)


def _major_minor(version: str | None) -> tuple[int, int] | None:
    if version is None or not version.strip():
        return None
    parts = version.strip().split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return (-1, -1)


def select_interface(card: AgentCard, *, want: str | None = None) -> tuple[str, str]:
    """The ``(url, version)`` to call: version ``"1.0"`` or ``"0.3"``.

    ``want`` forces a version when the card offers it. Raises VersionNotSupported when the card
    offers no JSON-RPC interface this client speaks.
    """
    candidates: list[tuple[str, str]] = []
    if card.supported_interfaces:
        for iface in card.supported_interfaces:
            if iface.protocol_binding.upper() != "JSONRPC":
                continue
            mm = _major_minor(iface.protocol_version)
            if mm is None or mm[0] >= 1:
                candidates.append((iface.url, "1.0"))
            elif mm >= (0, 3):
                candidates.append((iface.url, "0.3"))
    elif card.url and (card.preferred_transport or "JSONRPC").upper() == "JSONRPC":
        mm = _major_minor(card.protocol_version) or (0, 3)
        if mm[0] >= 1:
            candidates.append((card.url, "1.0"))
        elif mm >= (0, 3):
            candidates.append((card.url, "0.3"))
    order = [want] if want else ["1.0", "0.3"]
    for version in order:
        for url, v in candidates:
            if v == version:
                return url, v
    raise VersionNotSupported(
        f"the agent card offers no JSON-RPC interface in {' or '.join(order)} "
        f"(it offers: {', '.join(offered_interfaces(card)) or 'no interface at all'})"
    )


def offered_interfaces(card: AgentCard) -> list[str]:
    """What the card offers, for a message: each binding with its version (``GRPC 1.0``)."""
    found: list[str] = []
    if card.supported_interfaces:
        for iface in card.supported_interfaces:
            text = f"{iface.protocol_binding.upper()} {iface.protocol_version or '1.0'}"
            if text not in found:
                found.append(text)
    elif card.url:
        found.append(f"{(card.preferred_transport or 'JSONRPC').upper()} "
                     f"{card.protocol_version or '0.3'}")
    return found


REST_BINDING = "HTTP+JSON"
GRPC_BINDING = "GRPC"
_NAMES = {"JSONRPC": "jsonrpc", REST_BINDING: "rest", GRPC_BINDING: "grpc"}


def select_binding(card: AgentCard, *, transport: str | None = None,
                   want: str | None = None,
                   speaks: Collection[str] = ("jsonrpc", "rest", "grpc"),
                   ) -> tuple[str, str | None]:
    """Which binding to call: ``("jsonrpc", None)``, ``("rest", url)`` or ``("grpc", url)``.

    ``transport`` forces one (``"jsonrpc"``, ``"rest"`` or ``"grpc"``); otherwise the card's
    order decides: the first 1.0 interface it lists in a binding of ``speaks`` (the client
    leaves gRPC out when protobuf, the ``[grpc]`` extra, is not installed). REST and gRPC are 1.0
    only, so a forced ``want="0.3"`` means JSON-RPC. Raises VersionNotSupported when a binding
    is forced and the card offers no 1.0 interface of it.
    """
    urls: dict[str, str] = {}
    first: str | None = None
    for iface in card.supported_interfaces or ():
        binding = iface.protocol_binding.upper()
        mm = _major_minor(iface.protocol_version)
        if (mm is not None and mm[0] < 1) or binding not in _NAMES:
            continue
        urls.setdefault(_NAMES[binding], iface.url)
        if _NAMES[binding] in speaks:
            first = first or _NAMES[binding]
    chosen = transport or (first if want != "0.3" else None) or "jsonrpc"
    if chosen == "jsonrpc":
        return "jsonrpc", None
    label = "HTTP+JSON (REST)" if chosen == "rest" else "gRPC"
    if chosen not in urls:
        raise VersionNotSupported(f"the agent card offers no {label} 1.0 interface (it "
                                  f"offers: {', '.join(offered_interfaces(card)) or 'none'})")
    if want == "0.3":
        raise VersionNotSupported(f"the {label} binding is served in 1.0 only")
    return chosen, urls[chosen]
