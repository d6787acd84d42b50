"""gRPC over HTTP/2, the bytes: message framing, timeouts, status trailers (no I/O).

A gRPC message on the wire is a 5-byte prefix (a compressed flag, then the length as a 4-byte
big-endian integer) followed by the message. Requests of unary and server-streaming calls carry
exactly one. The call's outcome travels in the trailers: ``grpc-status`` (a code),
``grpc-message`` (percent-encoded text) and ``grpc-status-details-bin`` (a serialized
``google.rpc.Status``, base64). ``grpc-timeout`` is the client's deadline for the call.

Shared by the server's binding (``server/grpc/``) and the client's transport
(``client/grpc.py``): one wire format, written and read in one place.
"""

from __future__ import annotations

import base64
import math
import struct
import zlib

from ..errors import InvalidRequest, LimitExceeded

PREFIX = struct.Struct(">?I")
"""The message prefix: compressed flag, length."""

CONTENT_TYPE = b"application/grpc"
ACCEPT_ENCODING = b"identity,gzip"
"""What this server reads in a request (``grpc-accept-encoding``); it answers uncompressed."""

MAX_MESSAGE_CHARS = 1024
"""A status message longer than this is cut. Messages can echo what the caller sent (a task
id, a header), and a header of a megabyte takes the h2 package's HPACK encoder minutes of CPU
(it is quadratic in the value's length), which froze the event loop for every connection."""

_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


class UnsupportedEncoding(Exception):
    """The request's ``grpc-encoding`` is one this server does not decompress."""


class CompressedWithoutEncoding(Exception):
    """A message is flagged compressed but the request names no compression (``grpc-encoding``
    absent or ``identity``): the gRPC protocol makes that an INTERNAL error."""


def frame(message: bytes) -> bytes:
    """One uncompressed length-prefixed message."""
    return PREFIX.pack(False, len(message)) + message


def one_message(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The single message a unary or server-streaming request body holds.

    ``encoding``: the request's ``grpc-encoding`` (a compressed message is inflated, at most
    ``limit`` bytes). Raises InvalidRequest when the body is not exactly one whole message,
    LimitExceeded when it inflates past ``limit`` (as a message sent that large is refused),
    UnsupportedEncoding for a compression other than gzip, CompressedWithoutEncoding for a
    message flagged compressed in a request that names no compression.
    """
    if len(body) < PREFIX.size:
        raise InvalidRequest("the request holds no gRPC message (expected one, length-prefixed)")
    compressed, length = PREFIX.unpack_from(body)
    if len(body) != PREFIX.size + length:
        raise InvalidRequest("the request must hold exactly one whole gRPC message "
                             f"(its prefix says {length} bytes, {len(body) - PREFIX.size} came)")
    data = body[PREFIX.size:]
    if not compressed:
        return data
    named = (encoding or "identity").strip().lower()
    if named == "identity":
        raise CompressedWithoutEncoding
    if named != "gzip":
        raise UnsupportedEncoding(encoding)
    try:
        inflated = zlib.decompressobj(wbits=31)
        data = inflated.decompress(data, limit + 1)
    except zlib.error:
        raise InvalidRequest("the compressed gRPC message is not valid gzip") from None
    if len(data) > limit:
        raise LimitExceeded(f"the request message inflates to more than {limit} bytes")
    return data


def timeout_seconds(value: str | None) -> float | None:
    """``grpc-timeout`` (``100m``, ``5S``: at most 8 digits and a unit) in seconds; None when
    absent or malformed (a malformed one is ignored rather than refused, as grpc servers do)."""
    if not value:
        return None
    value = value.strip()
    digits, unit = value[:-1], value[-1:]
    if not (1 <= len(digits) <= 8 and digits.isascii() and digits.isdigit()) or unit not in _UNITS:
        return None
    return int(digits) * _UNITS[unit]


def format_timeout(seconds: float) -> str:
    """``grpc-timeout`` for a deadline ``seconds`` away: at most 8 digits and a unit, rounded
    up (a call never gets less time than it has), in the finest unit that fits."""
    seconds = max(seconds, 0.0)
    for unit, size in (("u", 1e-6), ("m", 1e-3), ("S", 1.0), ("M", 60.0), ("H", 3600.0)):
        count = math.ceil(seconds / size)
        if count < 100_000_000:
            return f"{max(count, 1)}{unit}"
    return "99999999H"


class MessageReader:
    """Length-prefixed messages out of a byte stream fed in pieces (a response body).

    ``feed`` returns the messages the bytes complete. A compressed message (the client asks for
    identity only: a peer that compresses anyway is broken) or one longer than ``limit``
    raises ``ValueError`` saying which, for the caller to word as the peer's fault.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of a message begun and not yet complete (non-zero at the end: truncated)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        out: list[bytes] = []
        while len(self._buffer) >= PREFIX.size:
            compressed, length = PREFIX.unpack_from(self._buffer)
            if compressed:
                raise ValueError("a compressed message, though only identity was accepted")
            if length > self.limit:
                raise ValueError(f"a message of {length} bytes, over the limit of "
                                 f"{self.limit}")
            end = PREFIX.size + length
            if len(self._buffer) < end:
                break
            out.append(bytes(self._buffer[PREFIX.size:end]))
            del self._buffer[:end]
        return out


def brief(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters: its middle goes (marked with an ellipsis), so the
    end of a message that echoes a long value ("... not found") is still read."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "\u2026" + text[len(text) - (limit - 1 - head):]


def percent_encode(text: str) -> bytes:
    """``grpc-message``'s encoding: printable ASCII but ``%`` as is, every other byte ``%XX``."""
    out = bytearray()
    for byte in text.encode("utf-8"):
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def percent_decode(raw: bytes) -> str:
    """``grpc-message`` back to text (a malformed escape is kept as it is, as gRPC does)."""
    out = bytearray()
    at = 0
    while at < len(raw):
        byte = raw[at]
        if byte == 0x25 and  _is_hex(raw[at + 1:at + 3]):
            out.append(int(raw[at + 1:at + 3], 16))
            at += 3
            continue
        out.append(byte)
        at += 1
    return out.decode("utf-8", errors="replace")


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair)


def status_trailers(code: int, message: str = "",
                    details: bytes | None = None) -> list[tuple[bytes, bytes]]:
    """The trailers of a call that ended with ``code`` (0: OK); ``message`` is cut to
    :data:`MAX_MESSAGE_CHARS` (``details`` is the caller's to keep small: :func:`brief`)."""
    trailers = [(b"grpc-status", str(code).encode())]
    if message:
        trailers.append((b"grpc-message", percent_encode(brief(message))))
    if details is not None:
        # Binary metadata is base64; gRPC emits it without padding (and accepts either).
        trailers.append((b"grpc-status-details-bin", base64.b64encode(details).rstrip(b"=")))
    return trailers
