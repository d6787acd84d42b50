"""The idempotent-send extension: a resent messageId is the same send (no I/O).

Declared in the agent card by servers whose sends are deduplicated by ``messageId`` per caller
(docs/exactly-once.md); :class:`~scoped_a2a.client.A2AClient` retries a send after a connection
error only when the agent's card declares it, since a retry to a server without it may run the
message twice.
"""

from __future__ import annotations

from typing import Any

IDEMPOTENT_SEND_EXTENSION_URI = "https://github.com/scoped-a2a/scoped-a2a/ext/idempotent-send/v1"

CARD_ENTRY: dict[str, Any] = {
    "uri": IDEMPOTENT_SEND_EXTENSION_URI,
    "description": "A send whose messageId the same caller already sent answers with the task "
    "that send created (no second run); the same messageId with another message is -32602",
    "required": False,
}
