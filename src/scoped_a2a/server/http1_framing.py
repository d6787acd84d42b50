"""Refuse HTTP/1.1 request heads that h11 accepts but a server behind a proxy must not serve:
ambiguous body framing and HTTP versions this layer does not speak.

What h11 (0.16, under hypercorn) lets through, measured over raw sockets:

- **Both Content-Length and Transfer-Encoding.** h11 frames the body by Transfer-Encoding
  (RFC 9112 6.3: "Transfer-Encoding overrides") and keeps the connection open. A proxy in
  front that frames by Content-Length instead sees a different request boundary: the bytes
  after it are a second, smuggled request. RFC 9112 6.3: such a request "ought to be handled
  as an error", and "the server MUST close the connection after responding". A body framed
  by Content-Length under that head also left h11 waiting for chunks until the body's
  deadline: a 408 for what is a malformed request.
- **Transfer-Encoding in an HTTP/1.0 request.** HTTP/1.0 has no chunked coding: RFC 9112 6.1,
  the framing "MUST" be treated as faulty and the connection closed. h11 read it as chunked.
- **Any version in the request line** (``HTTP/9.9``, ``HTTP/2.0``, ``HTTP/0.9``): served as
  HTTP/1.x, with the ASGI scope claiming that version. Only HTTP/1.x is spoken on this
  syntax (a higher minor version is served as 1.1, RFC 9110 6.2); another major version is
  answered ``505 HTTP Version Not Supported`` (RFC 9110 15.6.6). The HTTP/2 preface
  (``PRI * HTTP/2.0``) is not a request: hypercorn switches to HTTP/2 on it (or closes, with
  HTTP/2 off), as before.

And two things h11 refused that must be served. Bytes after a request that ends the
connection (HTTP/1.0 without keep-alive, a ``Connection: close`` request) made h11 raise, and
hypercorn answered that request ``400`` with no body in place of its answer. RFC 9112 9.6: the
server answers it and processes no further request; the bytes are now dropped. And an empty
line before a request line (a CRLF after a POST body, which old clients add) drew ``400``:
RFC 9112 2.2, it is ignored now.

How: hypercorn's ``H11Protocol`` gets an ``h11.Connection`` whose ``next_event`` checks each
request head it parses and raises h11's own ``RemoteProtocolError`` for these. That is the
path every malformed head already takes in hypercorn: the error answer with ``connection:
close``, then the connection is closed; the app never sees the request. Its answer carries a
short text saying what to fix (hypercorn's own error answers have no body). The check costs a
scan of the head's header names per request.

Patched once per process from :mod:`.hypercorn_fixes` (same version guard). Raises nothing at
install; on cancellation nothing is held (the check is synchronous).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from itertools import chain
from typing import Any

import h11

BOTH_LENGTHS = (b"a request may have Content-Length or Transfer-Encoding, not both "
                b"(RFC 9112 6.3): send one")
TE_IN_HTTP10 = (b"an HTTP/1.0 request cannot have a Transfer-Encoding (RFC 9112 6.1): send "
                b"Content-Length, or HTTP/1.1")
BAD_VERSION = (b"this server speaks HTTP/1.1 (or HTTP/2 after its preface): send HTTP/1.1 in "
               b"the request line")


class RefusedHead(h11.RemoteProtocolError):
    """A head h11 parsed that is refused here; ``answer`` is the text the client is sent
    (none to a HEAD request: its answer has no body, and h11 refuses to write one)."""

    def __init__(self, answer: bytes, status: int) -> None:
        super().__init__(answer.decode(), error_status_hint=status)
        self.answer = answer


def refusal(request: h11.Request) -> RefusedHead | None:
    """Why ``request`` (a head h11 parsed) must not be served, or None."""
    version = request.http_version
    if version[:2] != b"1.":
        if request.method == b"PRI" and request.target == b"*" and version == b"2.0":
            return None  # the HTTP/2 preface: hypercorn's protocol check takes it
        return RefusedHead(BAD_VERSION, 505)
    has_length = has_coding = False
    for name, _ in request.headers:  # h11 lower-cases names
        if name == b"content-length":
            has_length = True
        elif name == b"transfer-encoding":
            has_coding = True
    if has_coding and has_length:
        return RefusedHead(BOTH_LENGTHS, 400)
    if has_coding and version == b"1.0":
        return RefusedHead(TE_IN_HTTP10, 400)
    return None


class StrictConnection(h11.Connection):
    """``h11.Connection`` that raises :class:`RefusedHead` for a head :func:`refusal` refuses.

    The refusal is raised as the head is parsed, before hypercorn makes a stream of it; the
    client's side is then in h11's ERROR state, as after an error h11 raises itself
    (hypercorn answers and closes).
    """

    refused: RefusedHead | None = None
    refused_head_request = False

    def next_event(self) -> Any:
        if self.their_state is h11.MUST_CLOSE and self._receive_buffer:
            # Bytes after a request that ends the connection (HTTP/1.0, "Connection: close"):
            # RFC 9112 9.6, no further request is processed; they are dropped. h11 raised on
            # them instead, and hypercorn answered a bodiless 400 in place of that request's
            # answer (its run cancelled as a hang-up): one trailing CRLF after an HTTP/1.0
            # POST body, which old clients send, was enough.
            self._receive_buffer.maybe_extract_at_most(len(self._receive_buffer))
        elif self.their_state is h11.IDLE:
            self._drop_empty_lines()
        event = super().next_event()
        if type(event) is h11.Request:
            refused = refusal(event)
            if refused is not None:
                self.refused = refused  # for the answer's text
                self.refused_head_request = event.method == b"HEAD"
                # What h11 does with its own errors. Without it the client's side stayed in
                # SEND_BODY, where hypercorn lets an h11 error writing the answer escape:
                # writing the text to a HEAD request ended a trio server's process.
                self._process_error(self.their_role)
                raise refused
        return event


    def _drop_empty_lines(self) -> None:
        """Drop the empty lines (CRLF or LF) in front of the next request line: RFC 9112 2.2, a
        server SHOULD ignore at least one. h11 refused them ("no request line received"), so
        a CRLF after a POST body, which old clients add, drew an unasked 400 after the POST's
        answer, read by a client reusing the connection as its next request's answer."""
        buffer = self._receive_buffer
        data = buffer._data  # h11's bytearray: reading its first bytes copies nothing else
        count = 0
        while True:
            if data[count:count + 1] == b"\n":
                count += 1
            elif data[count:count + 2] == b"\r\n":
                count += 2
            else:
                break
        if count:
            buffer.maybe_extract_at_most(count)


def install(protocol_class: Any) -> None:
    """Patch hypercorn's ``H11Protocol`` (once per process, from hypercorn_fixes.install)."""
    init: Callable[..., None] = protocol_class.__init__
    send_error: Callable[[Any, int], Awaitable[None]] = protocol_class._send_error_response

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        # The same construction as hypercorn's, with the check.
        self.connection = StrictConnection(
            h11.SERVER, max_incomplete_event_size=self.config.h11_max_incomplete_size)

    async def _send_error_response(self: Any, status_code: int) -> None:
        refused = getattr(self.connection, "refused", None)
        if refused is None:
            await send_error(self, status_code)
            return
        # hypercorn's error answer, with the reason as its body.
        headers = [(b"content-type", b"text/plain; charset=utf-8"),
                   (b"content-length", b"%d" % len(refused.answer)), (b"connection", b"close")]
        await self._send_h11_event(h11.Response(
            status_code=status_code,
            headers=list(chain(headers, self.config.response_headers("h11")))))
        if not self.connection.refused_head_request:  # (HEAD: the length, without the body)
            await self._send_h11_event(h11.Data(data=refused.answer))
        await self._send_h11_event(h11.EndOfMessage())

    protocol_class.__init__ = __init__
    protocol_class._send_error_response = _send_error_response
