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


class ClientGone(Exception):
    """The client disconnected before its body was read (nobody to answer)."""


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of a request header (``name`` lower-case), decoded as latin-1."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """Read the whole request body, refusing more than ``limit`` bytes.

    A declared Content-Length over the limit is refused before reading anything. On cancellation
    the partial body is dropped. Raises BodyTooLarge or ClientGone.
    """
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(more_body=bool(message.get("more_body", False)))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


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
    client finish sending and read our answer. Beyond ``DISCARD_BYTES`` or ``DISCARD_SECONDS``
    (or a declared length larger than that) it gives up at once: the client may then see a reset
    instead of the answer, which is the price of not reading unbounded input. Returns at a
    disconnect; cancellation just stops the reading.
    """
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > DISCARD_BYTES:
        return
    size = 0
    with anyio.move_on_after(DISCARD_SECONDS):
        while size <= DISCARD_BYTES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            size += len(message.get("body", b""))


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
