"""HTTP/1.1 heads h11 accepts that are refused here (server/http1_framing.py).

Both Content-Length and Transfer-Encoding was served, framed by Transfer-Encoding, on a
connection kept open (a proxy framing by Content-Length sees another request boundary:
smuggling), or, with a Content-Length body, left waiting for chunks until the body deadline's
408; ``HTTP/9.9`` in the request line was served as HTTP/1.1. Now each gets its error with the
reason, the connection is closed, and the agent never runs. Raw sockets against hypercorn, on
both backends.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scoped_a2a import A2AApp, RunContext

from .h2client import RawH2
from .helpers import served
from .test_header_deadline import read_for

pytestmark = pytest.mark.anyio

CARD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n"
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
    "role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}}}).encode()
CHUNKED = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
CLOSING_CARD = CARD.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")  # read to its end


def post(version: bytes, headers: bytes, body: bytes) -> bytes:
    return (b"POST / HTTP/%s\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n%s"
            % (version, headers, body))


@asynccontextmanager
async def counting_server(*, http2: bool = False) -> AsyncIterator[tuple[int, list[str]]]:
    """A served echo agent; yields its port and the texts of the runs it started."""
    runs: list[str] = []

    async def echo(ctx: RunContext) -> str:
        runs.append(ctx.text)
        return ctx.text

    async with served(A2AApp(echo, public_url="http://127.0.0.1/"), http2=http2) as url:
        yield int(url.rsplit(":", 1)[1].strip("/")), runs


async def exchange(port: int, data: bytes) -> tuple[bytes, bool]:
    """Send ``data``; what the server says within 3 s, and whether it closed by then (the
    keep-alive timeout is 75 s: open then means not closed)."""
    conn: SocketStream = await anyio.connect_tcp("127.0.0.1", port)
    async with conn:
        await conn.send(data)
        return await read_for(conn, 3)


REFUSED = {
    # TE wins in h11: the chunked body was served and the connection kept open; a proxy
    # framing by Content-Length would have passed the trailing request as part of the body.
    "both, chunked body": (post(b"1.1", b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n"
                                % len(CHUNKED), CHUNKED) + CARD, 400, b"not both"),
    # Framed by Content-Length under a chunked head: h11 waited for chunks (408 at the body
    # deadline).
    "both, length body": (post(b"1.1", b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n"
                               % len(BODY), BODY), 400, b"not both"),
    "chunked in HTTP/1.0": (post(b"1.0", b"Transfer-Encoding: chunked\r\n", CHUNKED), 400,
                            b"HTTP/1.0"),
    "HTTP/9.9": (CARD.replace(b"HTTP/1.1", b"HTTP/9.9") + CARD, 505, b"HTTP/1.1"),
    "HTTP/2.0 as text": (CARD.replace(b"HTTP/1.1", b"HTTP/2.0"), 505, b"HTTP/1.1"),
    "HTTP/0.9": (CARD.replace(b"HTTP/1.1", b"HTTP/0.9"), 505, b"HTTP/1.1"),
}


@pytest.mark.parametrize("name", list(REFUSED))
async def test_a_smuggling_prone_head_is_refused_with_its_reason_and_closed(name: str) -> None:
    data, status, reason = REFUSED[name]
    async with counting_server() as (port, runs):
        got, closed = await exchange(port, data)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status) and reason in body and closed, (
        f"closed: {closed}; the server said {got[:400]!r}")
    answers = re.findall(rb"HTTP/1\.1 \d{3} \r\n", got)  # (a body ends without \n)
    assert len(answers) == 1, f"a request after the refused one was answered: {got!r}"
    assert runs == [], f"the agent ran for a refused request: {runs}"


@pytest.mark.parametrize("name,data", [
    ("chunked HTTP/1.1", post(b"1.1", b"Transfer-Encoding: chunked\r\n", CHUNKED)),
    ("length HTTP/1.0", post(b"1.0", b"Content-Length: %d\r\n" % len(BODY), BODY)),
    # RFC 9110 6.2: a higher minor version is served as the highest one spoken.
    ("HTTP/1.2", post(b"1.2", b"Content-Length: %d\r\n" % len(BODY), BODY)),
])
async def test_well_framed_requests_are_still_served(name: str, data: bytes) -> None:
    async with counting_server() as (port, runs):
        got, _ = await exchange(port, data)
    assert got.startswith(b"HTTP/1.1 200 ") and b'"completed"' in got, got[:400]
    assert runs == ["hi"], runs


async def test_the_http2_preface_still_switches_to_http2() -> None:
    """``PRI * HTTP/2.0`` is a version this layer refuses in a request line, except as the
    HTTP/2 preface."""
    async with counting_server(http2=True) as (port, _):
        client = await anyio.to_thread.run_sync(RawH2, port)
        try:
            stream = client.start("/.well-known/agent-card.json")
            status = await anyio.to_thread.run_sync(client.status, stream)
        finally:
            client.close()
    assert status == 200


@pytest.mark.parametrize("name,data,status", [
    ("HEAD, both lengths", b"HEAD / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("HEAD, HTTP/9.9", b"HEAD / HTTP/9.9\r\nHost: x\r\n\r\n", 505),
], ids=lambda value: value if isinstance(value, str) else "")
async def test_a_refused_head_request_is_answered_without_a_body_and_the_server_serves_on(
        name: str, data: bytes, status: int, caplog: pytest.LogCaptureFixture) -> None:
    """A HEAD request's answer has no body, and the refusal's text is one: h11 refused to
    write it, which ended a trio server's process (every connection with it) and logged a
    traceback on asyncio, for one request from anyone."""
    caplog.set_level(logging.ERROR)
    async with counting_server() as (port, _):
        got, closed = await exchange(port, data)
        after, _ = await exchange(port, CARD)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status) and body == b"" and closed, (
        f"closed: {closed}; the server said {got[:400]!r}")
    assert after.startswith(b"HTTP/1.1 200 "), f"the next request got {after[:200]!r}"
    errors = [r.getMessage()[:200] for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], errors


@pytest.mark.parametrize("name,data", [
    # RFC 2616 4.1: "certain buggy HTTP/1.0 client implementations generate extra CRLF's
    # after a POST request".
    ("HTTP/1.0, a CRLF after the body",
     post(b"1.0", b"Content-Length: %d\r\n" % len(BODY), BODY) + b"\r\n"),
    # RFC 9112 9.6: after a request with "close" the server answers it and processes no
    # further request.
    ("Connection: close, a request behind it",
     post(b"1.1", b"Connection: close\r\nContent-Length: %d\r\n" % len(BODY), BODY) + CARD),
], ids=lambda value: value if isinstance(value, str) else "")
async def test_bytes_after_a_request_that_ends_the_connection_do_not_spoil_its_answer(
        name: str, data: bytes) -> None:
    """h11 raised on any byte after such a request: hypercorn answered a bodiless 400 in
    place of the request's answer (or nothing, when the answer won the race) and the run was
    cancelled as a hang-up."""
    async with counting_server() as (port, runs):
        got, closed = await exchange(port, data)
    answers = re.findall(rb"HTTP/1\.1 \d{3} \r\n", got)  # (a body ends without \n)
    assert got.startswith(b"HTTP/1.1 200 ") and b'"completed"' in got and closed, (
        f"closed: {closed}; the server said {got[:400]!r}")
    assert len(answers) == 1, f"a request after the last one was answered: {got!r}"
    assert runs == ["hi"], runs


async def test_empty_lines_before_a_request_line_are_ignored() -> None:
    """RFC 9112 2.2: a server SHOULD ignore at least one empty line before a request-line (old
    clients add a CRLF after a POST body). h11 refused it: after the POST's 200 came an
    unasked 400 (a client reusing the connection reads it as its next request's answer), and
    the request behind the CRLF was refused."""
    async with counting_server() as (port, runs):
        got, closed = await exchange(port, post(
            b"1.1", b"Content-Length: %d\r\n" % len(BODY), BODY) + b"\r\n\r\n" + CARD)
        first, _ = await exchange(port, b"\n\r\n" + CLOSING_CARD)
    answers = re.findall(rb"HTTP/1\.1 (\d{3}) \r\n", got)  # (a body ends without a newline)
    assert answers == [b"200", b"200"] and not closed, f"closed: {closed}; {got[-400:]!r}"
    assert first.startswith(b"HTTP/1.1 200 "), first[:200]
    assert runs == ["hi"], runs


def _cased(name: str, upper: list[bool]) -> bytes:
    return "".join(c.upper() if up else c for c, up in
                   zip(name, upper + [False] * len(name), strict=False)).encode()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(length=st.booleans(), coding=st.booleans(), coding_first=st.booleans(),
       version=st.sampled_from([b"1.0", b"1.1"]), upper=st.lists(st.booleans(), max_size=17),
       space=st.sampled_from([b"", b" ", b"\t", b" \t "]))
async def test_framing_heads_of_any_spelling_are_served_or_refused_as_the_rfc_says(
        length: bool, coding: bool, coding_first: bool, version: bytes, upper: list[bool],
        space: bytes) -> None:
    """Content-Length and Transfer-Encoding in any letter case, order and surrounding
    whitespace, with a request pipelined behind: both together (RFC 9112 6.3), or
    Transfer-Encoding in HTTP/1.0 (6.1), is refused, closed, and nothing runs; any other head
    is served, and the request behind it is answered only where the connection persists."""
    fields = []
    if length:
        body = BODY
        fields.append(_cased("content-length", upper) + b":%s%d%s\r\n" % (space, len(BODY), space))
    if coding:
        body = CHUNKED
        field = _cased("transfer-encoding", upper) + b":%schunked%s\r\n" % (space, space)
        fields.insert(0 if coding_first else len(fields), field)
    if not (length or coding):
        body, fields = b"", [b"Content-Length: 0\r\n"]
    behind = CARD.replace(b"Host: x", b"Host: x\r\nConnection: close")
    async with counting_server() as (port, runs):
        got, closed = await exchange(port, post(version, b"".join(fields), body) + behind)
    answers = re.findall(rb"HTTP/1\.1 (\d{3}) \r\n", got)
    if coding and (length or version == b"1.0"):
        assert answers == [b"400"] and closed and runs == [], (
            f"closed: {closed}, runs {runs}; {got[-300:]!r}")
    else:
        served = [b"200", b"200"] if version == b"1.1" else [b"200"]
        assert answers == served and closed, f"closed: {closed}; {got[-300:]!r}"
        assert runs == (["hi"] if length or coding else []), runs  # (no body: a parse error)


@pytest.mark.parametrize("target", [b"http://x/.well-known/agent-card.json",
                                    b"HTTP://127.0.0.1:9/.well-known/agent-card.json"])
async def test_an_absolute_form_target_is_served_like_its_path(target: bytes) -> None:
    """RFC 9112 3.2.2: a server MUST accept the absolute-form (``GET http://host/path``, what a
    client configured for a proxy sends); it was answered 404. A JSON-RPC send to ``http://x/``
    is served too."""
    async with counting_server() as (port, runs):
        got, _ = await exchange(port, CLOSING_CARD.replace(b"/.well-known/agent-card.json",
                                                           target))
        assert got.startswith(b"HTTP/1.1 200"), got[:300]
        assert b'"supportedInterfaces"' in got or b'"url"' in got, got[:300]
        got, _ = await exchange(port, post(
            b"1.1", b"Content-Length: %d\r\nConnection: close\r\n" % len(BODY), BODY)
                                .replace(b"POST / ", b"POST http://x/ "))
        assert got.startswith(b"HTTP/1.1 200") and b'"hi"' in got, got[:300]
        assert runs == ["hi"]
