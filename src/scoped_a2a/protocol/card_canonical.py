"""The canonical bytes of an agent card that signatures cover (A2A 1.0 §8.4; no I/O).

A card is reduced to the fields of the 1.0 ``AgentCard`` message (a2a.proto), as a protobuf
JSON round trip would leave it: unknown fields dropped (our card also carries the 0.3 top-level
``url``, ``preferredTransport``, ``protocolVersion``, which are therefore **not** signed),
scalars at their default dropped unless the field has presence (``optional``), then empty
strings, lists and objects removed, ``signatures`` excluded, and the rest serialized with JCS
(RFC 8785). This is exactly what the official a2a-sdk signs and verifies, so signatures interop
both ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A message's fields by JSON name: "s" string/number/bool scalar (default dropped), "o" a
# scalar with presence (kept when set), "j" a Struct (kept as JSON), or a nested schema;
# ("list", x) repeated, ("map", x) a map; ("oneof", {...}) members are messages with presence.
_STRING_LIST = {"list": ("list", "s")}
_REQUIREMENT = {"schemes": ("map", _STRING_LIST)}
_FLOW_FIELDS = {"authorizationUrl": "s", "tokenUrl": "s", "refreshUrl": "s",
                "scopes": ("map", "s"), "pkceRequired": "s", "deviceAuthorizationUrl": "s"}
_SCHEME = {
    "apiKeySecurityScheme": {"description": "s", "location": "s", "name": "s"},
    "httpAuthSecurityScheme": {"description": "s", "scheme": "s", "bearerFormat": "s"},
    "oauth2SecurityScheme": {
        "description": "s", "oauth2MetadataUrl": "s",
        "flows": {k: _FLOW_FIELDS for k in ("authorizationCode", "clientCredentials",
                                           "implicit", "password", "deviceCode")},
    },
    "openIdConnectSecurityScheme": {"description": "s", "openIdConnectUrl": "s"},
    "mtlsSecurityScheme": {"description": "s"},
}
_CARD: dict[str, Any] = {
    "name": "s", "description": "s", "version": "s", "documentationUrl": "o", "iconUrl": "o",
    "supportedInterfaces": ("list", {"url": "s", "protocolBinding": "s", "tenant": "s",
                                     "protocolVersion": "s"}),
    "provider": {"url": "s", "organization": "s"},
    "capabilities": {
        "streaming": "o", "pushNotifications": "o", "extendedAgentCard": "o",
        "extensions": ("list", {"uri": "s", "description": "s", "required": "s",
                                "params": "j"}),
    },
    "securitySchemes": ("map", _SCHEME),
    "securityRequirements": ("list", _REQUIREMENT),
    "defaultInputModes": ("list", "s"),
    "defaultOutputModes": ("list", "s"),
    "skills": ("list", {"id": "s", "name": "s", "description": "s", "tags": ("list", "s"),
                        "examples": ("list", "s"), "inputModes": ("list", "s"),
                        "outputModes": ("list", "s"),
                        "securityRequirements": ("list", _REQUIREMENT)}),
}


def _project(value: Any, schema: Any) -> Any:
    """``value`` as the protobuf message ``schema`` would keep it (None: dropped)."""
    if schema == "j":
        return value
    if schema == "o":
        return value if isinstance(value, (str, bool, int, float)) else None
    if schema == "s":
        # proto3 without presence: the default (False, 0, "") is not serialized
        return value if isinstance(value, (str, bool, int, float)) and value else None
    if isinstance(schema, tuple):
        kind, inner = schema
        if kind == "list":
            return [_project(v, inner) for v in value] if isinstance(value, list) else None
        if isinstance(value, Mapping):  # map
            return {str(k): _project(v, inner) for k, v in value.items()}
        return None
    if not isinstance(value, Mapping):
        return None
    return {k: _project(value[k], sub) for k, sub in schema.items() if k in value}


def _clean(value: Any) -> Any:
    """Remove empty strings, lists and objects (and nulls), recursively."""
    if isinstance(value, Mapping):
        cleaned = {k: c for k, v in value.items() if (c := _clean(v)) is not None}
        return cleaned or None
    if isinstance(value, list):
        items = [c for v in value if (c := _clean(v)) is not None]
        return items or None
    if value is None or (isinstance(value, str) and not value):
        return None
    return value


def canonical_card(card: Mapping[str, Any]) -> bytes:
    """The JCS bytes a card's signatures cover (``signatures`` excluded).

    Needs the ``rfc8785`` package (``pip install 'scoped-a2a[auth]'``).
    """
    import rfc8785

    projected = _clean(_project(card, _CARD)) or {}
    return bytes(rfc8785.dumps(projected))
