"""Small ASGI helpers: headers, reading a bounded body, sending a whole response.

These are the only places that speak raw ASGI besides the SSE writer and the disconnect watcher.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyTooLarge(Exception):
    """The request body is over the configured limit (answered 413).

    ``more_body`` tells whether the client is still sending (so the rest may be discarded).
    """

    def __init__(self, more_body: bool = True) -> None:
        super().__init__("the request body is over the limit")
        self.more_body = more_body


class BodyInTooManyPieces(BodyTooLarge):
    """The request body came in more than ``MAX_BODY_MESSAGES`` pieces (answered 413).

    Each piece (an ASGI message: one chunk of a chunked body, or one read of a plain one) costs
    the server a fixed amount of work whatever its size, so a body sent one byte at a time
    would make us spend seconds of CPU on a few hundred KiB. Capping the pieces bounds that.
    """

    def __init__(self, more_body: bool = True, pieces: int = 0) -> None:
        super().__init__(more_body)
        self.args = (f"the request body came in more than {pieces} pieces",)


MAX_BODY_MESSAGES = 4096
"""A request body in more pieces than this is refused (413), whatever its size. Ordinary clients
send a body in a few pieces (hypercorn hands on up to 64 KiB per read; chunked uploads use
chunks of KiBs): an 8 MiB body in 4 KiB chunks is 2,048 pieces."""


class ClientGone(Exception):
    """The client disconnected before its body was read (nobody to answer)."""


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (``name`` lower-case), decoded as latin-1."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def read_body(
    scope: Scope, receive: Receive, limit: int, max_messages: int | None = None
) -> bytes:
    """Read the whole request body, refusing more than ``limit`` bytes.

    A declared Content-Length over the limit is refused before reading anything; so is a body
    in more than ``max_messages`` pieces, once the piece after the last allowed one arrives. The
    pieces go into one growing buffer, so the work is linear in the body's size and pieces. On
    cancellation the partial body is dropped. Raises BodyTooLarge (BodyInTooManyPieces) or
    ClientGone.
    """
    max_messages = MAX_BODY_MESSAGES if max_messages is None else max_messages
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    pieces = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        more = bool(message.get("more_body", False))
        chunk = message.get("body", b"")
        pieces += 1
        if len(body) + len(chunk) > limit:
            raise BodyTooLarge(more_body=more)
        if pieces > max_messages:
            raise BodyInTooManyPieces(more_body=more, pieces=max_messages)
        body += chunk
        if not more:
            return bytes(body)


DISCARD_BYTES = 1 << 20
"""At most this many bytes of a refused body are read and dropped before answering."""
DISCARD_SECONDS = 2.0
"""...and for at most this long."""


async def discard_body(scope: Scope, receive: Receive) -> None:
    """Read and drop the rest of a request body that will not be used, within bounds.

    Call it before answering a request refused without reading (all) its body, unless the body
    was read to its end. Why: hypercorn closes the connection as soon as such a response ends,
    and closing a socket with unread request data makes the kernel reset the connection, so the
    client can lose the answer (seen with chunked bodies on the asyncio worker). Draining lets the
    client finish sending and read our answer. Beyond ``DISCARD_BYTES``, ``MAX_BODY_MESSAGES``
    pieces or ``DISCARD_SECONDS`` (or a declared length larger than that) it gives up at once:
    the client may then see a reset
    instead of the answer, which is the price of not reading unbounded input. Returns at a
    disconnect; cancellation just stops the reading.
    """
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > DISCARD_BYTES:
        return
    size = pieces = 0
    with anyio.move_on_after(DISCARD_SECONDS):
        while size <= DISCARD_BYTES and pieces <= MAX_BODY_MESSAGES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            size += len(message.get("body", b""))
            pieces += 1


async def send_response(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = b"application/json",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
