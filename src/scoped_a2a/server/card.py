"""The agent card: one JSON document that 1.0 and 0.3 clients both read (no I/O).

1.0 clients read ``supportedInterfaces`` (a 1.0 and a 0.3 JSON-RPC interface on the same URL);
0.3 clients read the legacy top-level ``url``, ``preferredTransport`` and ``protocolVersion``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol.deadline import CARD_ENTRY as DEADLINE_CARD_ENTRY
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
) -> dict[str, Any]:
    """The card for an agent served at ``url``; ``overrides`` replace top-level fields.

    ``capabilities`` in overrides is merged (so the trajectory extension stays advertised).
    """
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
            dict(DEADLINE_CARD_ENTRY),
        ],
    }
    caps.update(overrides.pop("capabilities", {}) or {})
    card: dict[str, Any] = {
        "name": name,
        "description": "An A2A agent served by scoped-a2a.",
        "version": "0.1.0",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "capabilities": caps,
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [DEFAULT_SKILL],
        # 0.3 clients read these.
        "url": url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "supportsAuthenticatedExtendedCard": extended,
    }
    card.update(overrides)
    return card
