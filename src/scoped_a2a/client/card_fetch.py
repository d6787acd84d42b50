"""Fetching an agent card over HTTP: one GET, checked and decoded (what ``A2AClient`` reads
first).

Cancellation: the GET is abandoned and its connection closed (httpx). Errors: a transport
failure -> ``AgentUnreachable``; a non-200 answer -> its
JSON-RPC error or ``AgentHTTPError``; a body that is not a card -> ``InvalidAgentResponse``;
a card none of whose signatures verifies -> ``CardSignatureError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import httpx
import msgspec

from ..protocol.errors import InvalidAgentResponse
from .card import AgentCard, decode_card
from .card_verify import CardVerifier
from .rpc import raise_for_http, transport_error


async def fetch_card(
    http: httpx.AsyncClient, where: str, *, headers: Mapping[str, str],
    auth: httpx.Auth | None, verify: CardVerifier | None = None,
) -> AgentCard:
    """The card at ``where`` (its full URL); ``verify``: refuse it unless one of its
    signatures verifies with the trusted keys. The caller bounds it with a cancel scope."""
    try:
        response = await http.get(
            where, headers=dict(headers),
            auth=auth if auth is not None else httpx.USE_CLIENT_DEFAULT)
    except httpx.TransportError as exc:
        raise transport_error(exc, where) from None
    if response.status_code != 200:
        raise_for_http(response.status_code, response.content)
    if verify is not None:
        try:
            raw = json.loads(response.content)
        except ValueError as exc:
            raise InvalidAgentResponse(f"the agent card at {where} is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise InvalidAgentResponse(f"the agent card at {where} is not a JSON object")
        verify.verify(raw)
    try:
        return decode_card(response.content)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidAgentResponse(f"the agent card at {where} is invalid: {exc}") from None
