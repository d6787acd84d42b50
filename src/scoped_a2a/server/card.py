"""The agent card: one JSON document that 1.0 and 0.3 clients both read (no I/O).

1.0 clients read ``supportedInterfaces`` (1.0 JSON-RPC, 1.0 HTTP+JSON and 0.3 JSON-RPC, all on the
same base URL; the preferred 1.0 binding first);
0.3 clients read the legacy top-level ``url``, ``preferredTransport`` and ``protocolVersion``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol.deadline import CARD_ENTRY as DEADLINE_CARD_ENTRY
from ..protocol.on_disconnect import DETACHED_KEY, ON_DISCONNECT_EXTENSION_URI, ON_DISCONNECT_KEY
from ..protocol.resend import CARD_ENTRY as IDEMPOTENT_SEND_CARD_ENTRY
from ..protocol.trajectory import TRAJECTORY_EXTENSION_URI

DEFAULT_SKILL = {
    "id": "chat",
    "name": "Chat",
    "description": "Answers a text message.",
    "tags": ["chat"],
}


def build_card(
    url: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    name: str = "scoped-a2a agent",
    push_notifications: bool = False,
    extended: bool = False,
    cancel_on_disconnect: bool = True,
    preferred_binding: str = "JSONRPC",
    idempotent_send: bool = False,
    v03_fields: bool = True,
    grpc: bool = False,
) -> dict[str, Any]:
    """The card for an agent served at ``url``; ``overrides`` replace top-level fields.

    ``capabilities`` in overrides is merged (so our extensions stay advertised).
    ``cancel_on_disconnect``: the server's default for the on-disconnect extension.
    ``preferred_binding``: ``"JSONRPC"`` or ``"HTTP+JSON"``, listed first (clients that take
    the first interface they speak use it). ``idempotent_send``: the store deduplicates sends
    by messageId (docs/exactly-once.md), declared as an extension. ``v03_fields``: the 0.3
    fields 0.3 clients read (``url``, ``preferredTransport``, ``protocolVersion``,
    ``supportsAuthenticatedExtendedCard``); False serves a card the 1.0 schema accepts, whose
    ``additionalProperties: false`` refuses them (docs/conformance.md). The 0.3 interface
    stays listed in ``supportedInterfaces`` either way: it is a valid 1.0 entry, and served.
    The HTTP+JSON interface's ``url`` has no trailing slash (:func:`rest_url`).
    ``grpc``: list the gRPC interface too (after the other two 1.0 ones), whose ``url`` is the
    gRPC target ``host:port`` of ``url`` (what gRPC clients dial), when ``url`` names a host.
    """
    one_oh = [
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": rest_url(url), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]
    if preferred_binding == "HTTP+JSON":
        one_oh.reverse()
    target = grpc_target(url) if grpc else None
    if target is not None:
        one_oh.append({"url": target, "protocolBinding": "GRPC", "protocolVersion": "1.0"})
    overrides = dict(overrides or {})
    caps = {
        "streaming": True,
        "pushNotifications": push_notifications,
        "extendedAgentCard": extended,
        "extensions": [
            {
                "uri": TRAJECTORY_EXTENSION_URI,
                "description": "Cursor reads of a task's live trajectory "
                "(method scoped_a2a/trajectory/read)",
                "required": False,
            },
            {
                "uri": ON_DISCONNECT_EXTENSION_URI,
                "description": f"Request metadata {ON_DISCONNECT_KEY!r}: \"cancel\" ends the "
                "run when its last caller hangs up, \"continue\" lets it finish; a task run "
                f"detached says why in its metadata {DETACHED_KEY!r}",
                "required": False,
                "params": {
                    "metadataKey": ON_DISCONNECT_KEY,
                    "values": ["cancel", "continue"],
                    "default": "cancel" if cancel_on_disconnect else "continue",
                    "detachedKey": DETACHED_KEY,
                },
            },
            dict(DEADLINE_CARD_ENTRY),
            *([dict(IDEMPOTENT_SEND_CARD_ENTRY)] if idempotent_send else []),
        ],
    }
    caps.update(overrides.pop("capabilities", {}) or {})
    card: dict[str, Any] = {
        "name": name,
        "description": "An A2A agent served by scoped-a2a.",
        "version": "0.1.0",
        "supportedInterfaces": [
            *one_oh,
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "capabilities": caps,
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [DEFAULT_SKILL],
    }
    if v03_fields:  # 0.3 clients read these
        card.update(url=url, preferredTransport="JSONRPC", protocolVersion="0.3.0",
                    supportsAuthenticatedExtendedCard=extended)
    card.update(overrides)
    return card


def rest_url(url: str) -> str:
    """The HTTP+JSON interface URL for base ``url``: without its trailing slash, since REST
    clients (the conformance kit among them) join ``f"{url}/message:send"``; a URL that is
    only slashes stays as given. (The server routes ``//message:send`` too: app.py.)"""
    return url.rstrip("/") or url


def grpc_target(url: str) -> str | None:
    """The gRPC target (``host:port``) of a base URL, or None when it names no host."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}"
