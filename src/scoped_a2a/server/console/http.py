"""The console's responses: security headers on every one, JSON, static files, SSE streams.

Every console response carries a strict Content-Security-Policy (scripts, styles, images and
connections from this origin only; no inline script or style, no frames, no plugins, no
string written to an HTML sink: Trusted Types) plus
``nosniff``, ``no-referrer`` and ``no-store``: the page shows other people's text (agent
messages), so even a rendering mistake must not become a running script.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Any

import anyio
import msgspec

from ...timeouts import fail_after
from ..asgi import Send, send_response

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; "
    # Spelt out although default-src covers it (scanners and older browsers look for it), and
    # no string may reach an HTML sink (innerHTML...): the browser enforces textContent-only.
    "object-src 'none'; require-trusted-types-for 'script'"
)

SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]

STATIC_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".svg": b"image/svg+xml",
}

_encode = msgspec.json.Encoder().encode


class StaticFiles:
    """The page's files, read from the package once and kept (a few tens of KiB)."""

    def __init__(self) -> None:
        self._cache: dict[str, bytes] = {}
        folder = resources.files(__package__).joinpath("static")
        self.names = frozenset(p.name for p in folder.iterdir()
                               if "." + p.name.rsplit(".", 1)[-1] in STATIC_TYPES)

    def get(self, name: str) -> tuple[bytes, bytes] | None:
        """``(body, content type)`` of a shipped file, or None for any other name."""
        if name not in self.names:
            return None
        body = self._cache.get(name)
        if body is None:
            body = resources.files(__package__).joinpath("static", name).read_bytes()
            self._cache[name] = body
        return body, STATIC_TYPES["." + name.rsplit(".", 1)[-1]]


async def send_json(send: Send, status: int, body: Any,
                    headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_response(send, status, _encode(body), headers=[*SECURITY_HEADERS, *headers])


async def send_error(send: Send, status: int, text: str,
                     headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_json(send, status, {"error": text}, headers)


async def send_file(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send_response(send, status, body, content_type=content_type, headers=SECURITY_HEADERS)


class EventStream:
    """One SSE response: ``event:`` + ``data:`` (JSON) frames, and keep-alive comments.

    Each write is bounded by ``write_timeout``: a client that takes nothing for that long ends
    the stream with TimeoutError (hypercorn's trio worker shields its writes; there the
    kernel's TCP_USER_TIMEOUT, set by ``serve``, aborts the connection instead). A hang-up
    cancels the request, and with it the writer, wherever it waits.
    """

    def __init__(self, send: Send, *, write_timeout: float = 30.0) -> None:
        self._send = send
        self._write_timeout = write_timeout
        self._started = False

    async def _write(self, chunk: bytes) -> None:
        with fail_after(self._write_timeout):
            if not self._started:
                self._started = True
                await self._send({"type": "http.response.start", "status": 200, "headers": [
                    (b"content-type", b"text/event-stream"), (b"x-accel-buffering", b"no"),
                    *SECURITY_HEADERS]})
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def event(self, name: str, data: Any) -> None:
        await self._write(b"event: " + name.encode() + b"\ndata: " + _encode(data) + b"\n\n")

    async def keepalive(self) -> None:
        await self._write(b": keep-alive\n\n")

    async def close(self) -> None:
        """End the response (headers first if nothing was written)."""
        with anyio.move_on_after(self._write_timeout):
            if not self._started:
                self._started = True
                await self._send({"type": "http.response.start", "status": 200, "headers": [
                    (b"content-type", b"text/event-stream"), *SECURITY_HEADERS]})
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
