"""HTTP caching of the agent card: a strong ``ETag``, ``Last-Modified``, and 304 answers (no I/O).

The card is fixed once the app is built (its fields come from code and options), so its bytes
hash to a stable entity tag and the app's start is its last modification. A client that holds
the card asks again with ``If-None-Match`` (or ``If-Modified-Since``) and gets ``304 Not
Modified`` with no body, as A2A's discovery section recommends (SHOULD for ``ETag``, MAY for
``Last-Modified``). ``If-None-Match`` wins when both are sent (RFC 9110 §13.2.2).
"""

from __future__ import annotations

import hashlib
from email.utils import formatdate, parsedate_to_datetime

from .asgi import Scope, Send, send_response


def entity_tag(body: bytes) -> bytes:
    """A strong entity tag for ``body``: the start of its SHA-256, quoted."""
    return b'"' + hashlib.sha256(body).hexdigest()[:32].encode() + b'"'


def http_date(timestamp: float) -> bytes:
    """``timestamp`` (seconds since the epoch) as an HTTP-date, whole seconds."""
    return formatdate(int(timestamp), usegmt=True).encode()


def not_modified(headers: dict[bytes, bytes], etag: bytes, last_modified: float) -> bool:
    """True when the request's validators say the client already holds this card."""
    if_none_match = headers.get(b"if-none-match")
    if if_none_match is not None:
        tags = {t.strip().removeprefix(b"W/") for t in if_none_match.split(b",")}
        return b"*" in tags or etag in tags
    since = headers.get(b"if-modified-since")
    if since is None:
        return False
    try:
        when = parsedate_to_datetime(since.decode("latin-1")).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return False  # an unreadable date is ignored, as RFC 9110 says
    return int(last_modified) <= when


async def send_card(scope: Scope, send: Send, body: bytes, etag: bytes,
                    last_modified: float) -> None:
    """Answer a card request: ``body`` with its validators, or 304 (no body) when the
    request's validators match them. Errors are the ASGI server's (the client went away)."""
    headers = [(b"cache-control", b"max-age=60"), (b"etag", etag),
               (b"last-modified", http_date(last_modified))]
    request_headers = {k.lower(): v for k, v in scope.get("headers", ())}
    if not_modified(request_headers, etag, last_modified):
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
    else:
        await send_response(send, 200, body, headers=headers)
