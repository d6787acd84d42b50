"""The gRPC client's pure pieces (no I/O): the card's gRPC URL, grpc-timeout written and read
back, grpc-message's percent-encoding, the length-prefixed message reader, a status mapped to
the client's exceptions as the other bindings map theirs, credentials as metadata, and the
binding chosen from the card's order."""

from __future__ import annotations

import base64

import pytest

from scoped_a2a.client.auth import ApiKey, BearerToken
from scoped_a2a.client.card import decode_card, select_binding
from scoped_a2a.client.errors import AgentTimeout, AgentUnreachable
from scoped_a2a.client.grpc import GrpcTransport, auth_metadata, grpc_target
from scoped_a2a.protocol.errors import (
    A2AError,
    InvalidAgentResponse,
    PermissionDenied,
    ServerUnavailable,
    TaskNotFound,
    Unauthenticated,
    VersionNotSupported,
)
from scoped_a2a.protocol.grpc import status as codes
from scoped_a2a.protocol.grpc.framing import (
    MessageReader,
    format_timeout,
    frame,
    percent_decode,
    percent_encode,
    timeout_seconds,
)
from scoped_a2a.protocol.grpc.messages import error_status


@pytest.mark.parametrize(("url", "base", "expected"), [
    ("127.0.0.1:50051", "http://127.0.0.1:8000/", ("127.0.0.1", 50051, False)),
    ("agent.example:443", "https://agent.example/", ("agent.example", 443, True)),
    ("grpcs://agent.example", "http://x/", ("agent.example", 443, True)),
    ("http://agent.example:81/ignored", "https://x/", ("agent.example", 81, False)),
    ("[::1]:9000", "http://x/", ("::1", 9000, False)),
])
def test_the_cards_grpc_url(url: str, base: str, expected: tuple[str, int, bool]) -> None:
    assert grpc_target(url, base_url=base) == expected


def test_a_grpc_url_without_host_is_refused() -> None:
    with pytest.raises(InvalidAgentResponse, match="not host:port"):
        grpc_target(":50051", base_url="http://x/")


@pytest.mark.parametrize("seconds", [0.0, 0.0004, 0.25, 1.5, 30.0, 99_999.0, 10**9])
def test_grpc_timeout_rounds_up_and_parses_back(seconds: float) -> None:
    text = format_timeout(seconds)
    back = timeout_seconds(text)
    assert back is not None and len(text) <= 9, text
    assert back >= seconds, (text, back)  # never less time than the caller has
    assert back <= max(seconds * 1.001, seconds + 1e-6) or seconds >= 1e8, (text, back)


def test_grpc_message_percent_encoding_round_trips() -> None:
    message = "task 'é%x' not found\n"
    assert percent_decode(percent_encode(message)) == message
    assert percent_decode(b"100%") == "100%"  # a bad escape is kept


def test_message_reader_across_pieces() -> None:
    reader = MessageReader(limit=100)
    wire = frame(b"first") + frame(b"") + frame(b"second")
    got = [m for at in range(len(wire)) for m in reader.feed(wire[at:at + 1])]
    assert got == [b"first", b"", b"second"] and reader.pending == 0
    assert reader.feed(frame(b"x")[:3]) == [] and reader.pending == 3
    with pytest.raises(ValueError, match="over the limit"):
        MessageReader(limit=4).feed(frame(b"too long"))
    with pytest.raises(ValueError, match="compressed"):
        MessageReader(limit=10).feed(b"\x01\x00\x00\x00\x01x")


def transport(on_refused: bool = True) -> GrpcTransport:
    return GrpcTransport("127.0.0.1:1", base_url="http://127.0.0.1:1/", timeout=1,
                         on_refused=(lambda status, body: f"refused {status} {body!r}")
                         if on_refused else None)


def test_statuses_map_to_the_client_exceptions() -> None:
    t = transport()
    details = codes.error_trailers(TaskNotFound("task 'x' not found"))
    raw = dict(details)[b"grpc-status-details-bin"]
    status_bytes = base64.b64decode(raw + b"=" * (-len(raw) % 4))
    err = t.status_error(codes.NOT_FOUND, "task 'x' not found", status_bytes)
    assert isinstance(err, TaskNotFound) and "x" in str(err)
    # The ErrorInfo reason wins over the code; without details the code decides.
    assert isinstance(t.status_error(codes.UNAVAILABLE, "bye", codes_status(
        "SERVER_UNAVAILABLE")), ServerUnavailable)
    assert isinstance(t.status_error(codes.NOT_FOUND, "", None), TaskNotFound)
    assert isinstance(t.status_error(codes.DEADLINE_EXCEEDED, "late", None), AgentTimeout)
    unreachable = t.status_error(codes.UNAVAILABLE, "down", None)
    assert type(unreachable) is AgentUnreachable and "down" in str(unreachable)
    assert type(t.status_error(codes.CANCELLED, "", None)) is AgentUnreachable
    assert type(t.status_error(codes.INTERNAL, "oops", None)) is A2AError
    # Refusals carry the card-based text the other bindings give (on_refused), with what
    # the agent said after the separator.
    denied = t.status_error(codes.PERMISSION_DENIED_STATUS, "no", None)
    assert isinstance(denied, PermissionDenied) and str(denied).startswith("refused 403")
    unauth = t.status_error(codes.UNAUTHENTICATED_STATUS, "std; expired", None)
    assert isinstance(unauth, Unauthenticated) and "expired" in str(unauth)
    assert isinstance(transport(False).status_error(codes.UNAUTHENTICATED_STATUS, "x", None),
                      Unauthenticated)
    assert isinstance(t.http_error(503), AgentUnreachable)


def codes_status(reason: str) -> bytes:
    return error_status(codes.UNAVAILABLE, "m", reason, "a2a-protocol.org")


def test_credentials_become_metadata() -> None:
    assert auth_metadata(BearerToken("t0k")) == [(b"authorization", b"Bearer t0k")]
    assert auth_metadata(ApiKey("k3y")) == [(b"x-api-key", b"k3y")]
    assert auth_metadata(ApiKey("k", header="X-Other")) == [(b"x-other", b"k")]
    assert auth_metadata(None) == []


CARD = b"""{"name": "x", "supportedInterfaces": [
  {"url": "h:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
  {"url": "http://h/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
  {"url": "http://h/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]}"""


def test_the_binding_follows_the_cards_order() -> None:
    card = decode_card(CARD)
    assert select_binding(card) == ("grpc", "h:1")
    assert select_binding(card, speaks=("jsonrpc", "rest")) == ("jsonrpc", None)
    assert select_binding(card, transport="rest") == ("rest", "http://h/rest")
    assert select_binding(card, want="0.3") == ("jsonrpc", None)
    with pytest.raises(VersionNotSupported, match=r"1\.0 only"):
        select_binding(card, transport="grpc", want="0.3")
    only_rest = decode_card(b'{"supportedInterfaces": [{"url": "http://h/", '
                            b'"protocolBinding": "HTTP+JSON"}]}')
    with pytest.raises(VersionNotSupported, match=r"no gRPC 1\.0 interface.*HTTP\+JSON 1\.0"):
        select_binding(only_rest, transport="grpc")
