"""A deadline on an HTTP/1.1 request's head (server/header_deadline.py, ``serve --header-timeout``).

hypercorn's idle timer (75 s here) is not shortened by a head that trickles in: a client sending
one byte a second held its connection for the whole 75 s (measured on both workers). With the
deadline, a head that has not arrived whole within ``header_timeout`` of its first byte gets 408
and the connection is closed; a head that arrives in time is answered, and an idle keep-alive
connection (no bytes of a next request yet) is not cut by it. Raw sockets against hypercorn, on
both backends, with a short deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream
from hpack import Decoder, Encoder
from hyperframe.frame import (
    ContinuationFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    SettingsFrame,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scoped_a2a import A2AApp, RunContext, serve
from scoped_a2a.server.header_deadline import TIMEOUT_ANSWER

pytestmark = pytest.mark.anyio

HEAD = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40 + b"\r\n\r\n"


async def echo(ctx: RunContext) -> str:
    return ctx.text


@asynccontextmanager
async def server(header_timeout: float, *, http2: bool = False) -> AsyncIterator[int]:
    app = A2AApp(echo, public_url="http://127.0.0.1/")
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(partial(serve, app, host="127.0.0.1", port=0, shutdown=shutdown,
                                      header_timeout=header_timeout, http2=http2))
        try:
            yield port
        finally:
            shutdown.set()


async def read_until_closed(conn: SocketStream) -> bytes:
    got = b""
    with anyio.fail_after(10):  # a hang guard: the deadline here is well under a second
        while True:
            try:
                got += await conn.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return got


async def read_answer(conn: SocketStream) -> bytes:
    got = b""
    with anyio.fail_after(10):
        while b"\r\n\r\n" not in got:
            got += await conn.receive()
    return got


async def trickle(conn: SocketStream, pieces: list[bytes], sent: list[int]) -> None:
    """Send ``pieces`` 50 ms apart until the server closes; ``sent[0]`` counts those sent."""
    for piece in pieces:
        try:
            await conn.send(piece)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        sent[0] += 1
        await anyio.sleep(0.05)


async def trickled_until_closed(conn: SocketStream, pieces: list[bytes]) -> tuple[bytes, int]:
    """:func:`trickle` ``pieces`` while reading until the server closes; what it sent, and how
    many pieces went out."""
    count = [0]
    async with anyio.create_task_group() as tg:
        tg.start_soon(trickle, conn, pieces, count)
        got = await read_until_closed(conn)
        tg.cancel_scope.cancel()
    return got, count[0]


async def test_a_trickled_head_gets_408_and_its_connection_is_closed() -> None:
    async with server(header_timeout=0.5) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            # A byte at a time, never the end of the head.
            got, sent = await trickled_until_closed(conn, [bytes([b]) for b in HEAD[:-4]])
        assert got.startswith(b"HTTP/1.1 408 "), (
            f"after {sent} of {len(HEAD) - 4} head bytes the server said {got[:200]!r}")
        assert sent < len(HEAD) - 4, "the whole trickle went through: no deadline cut it"


async def test_a_head_in_time_is_answered_and_an_idle_connection_is_not_cut() -> None:
    async with server(header_timeout=0.5) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            # In two pieces, within the deadline.
            await conn.send(HEAD[:20])
            await anyio.sleep(0.1)
            await conn.send(HEAD[20:])
            first = await read_answer(conn)
            assert first.startswith(b"HTTP/1.1 200 "), first[:200]
            # Idle (keep-alive) for longer than the head's deadline: still open, and answers.
            await anyio.sleep(1.0)
            await conn.send(HEAD)
            second = await read_answer(conn)
            assert b"HTTP/1.1 200 " in second, second[:200]


async def read_for(conn: SocketStream, seconds: float) -> tuple[bytes, bool]:
    """What arrives within ``seconds``, and whether the server closed the connection by then."""
    got = b""
    with anyio.move_on_after(seconds):
        while True:
            try:
                got += await conn.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return got, True
    return got, False


async def test_a_head_trickled_right_after_a_trickled_head_has_its_own_deadline() -> None:
    """The end of a trickled head and the start of the next one in one read (a client that
    keeps writing): the next head's deadline starts too. It did not: the first head's deadline
    was still taken as running, so the second head had hypercorn's 75 s idle timer."""
    async with server(header_timeout=0.5) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            await conn.send(HEAD[:10])  # an incomplete head: its deadline starts
            await anyio.sleep(0.1)
            await conn.send(HEAD[10:] + b"GET /.well-known/agent-card.json HTTP/1.1\r\n")
            count = [0]
            async with anyio.create_task_group() as tg:
                # The second head, a header line at a time, 4 s.
                tg.start_soon(trickle, conn, [f"X-More-{n}: b\r\n".encode() for n in range(80)],
                              count)
                got, closed = await read_for(conn, 8)  # the deadline is 0.5 s; keep-alive 75 s
                tg.cancel_scope.cancel()
            lines = count[0]
        assert got.startswith(b"HTTP/1.1 200 "), got[:300]
        assert b"HTTP/1.1 408 " in got and closed, (
            f"the second head trickled {lines} header lines (deadline 0.5 s); the server sent "
            f"{len(got)} bytes, ending {got[-200:]!r}, closed: {closed}")


@pytest.mark.parametrize("head", [
    # curl --http2 on an http:// URL asks for h2c like this; served over HTTP/1.1 (h2 off).
    b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings"
    b"\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket-ish\r\n\r\n",
], ids=["h2c", "other"])
async def test_a_connection_idle_after_an_upgrade_request_is_not_cut(head: bytes) -> None:
    """A request that offers an upgrade (declined: answered over HTTP/1.1) is answered before
    hypercorn's handling of its bytes returns, so the connection is already idle, with no
    bytes of a next head, when the deadline's check runs. It took that for a head just begun:
    an unasked-for 408 and a close after the head deadline instead of the 75 s keep-alive."""
    async with server(header_timeout=0.5) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            await conn.send(head)
            first, closed = await read_for(conn, 1.5)  # three deadlines, idle
            assert first.startswith(b"HTTP/1.1 200 ") and b" 408 " not in first and not closed, (
                f"closed: {closed}; the server said {first[:120]!r}...{first[-120:]!r}")
            await conn.send(HEAD)
            second = await read_answer(conn)
            assert second.startswith(b"HTTP/1.1 200 "), second[:200]


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % len(data) for c in cuts} - {0})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@pytest.mark.one_python  # a property over real sockets, ~12 s a backend: suite time (3.11)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.lists(st.integers(0, 6), min_size=1, max_size=3),
       cuts=st.lists(st.integers(0, 10_000), max_size=12),
       pause=st.sampled_from([0.0, 0.01]),
       stalled=st.one_of(st.none(), st.integers(1, 60)))
async def test_heads_split_anywhere_are_answered_and_a_stalled_one_gets_408(
        heads: list[int], cuts: list[int], pause: float, stalled: int | None) -> None:
    """Requests pipelined on one connection, their bytes cut into reads at any points (a read
    ending one head and starting the next included), arriving well within the deadline: each is
    answered 200 and none gets 408. Then, when ``stalled``, a head's first bytes and nothing
    more: 408 and the connection closed, whatever the reads before were."""
    requests = [b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n"
                + b"".join(b"X-%d: y\r\n" % i for i in range(extra)) + b"\r\n" for extra in heads]
    stream = b"".join(requests) + (HEAD[:stalled] if stalled is not None else b"")
    async with server(header_timeout=1.0) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            for piece in _split(stream, cuts):
                await conn.send(piece)
                await anyio.sleep(pause)
            got, closed = await read_for(conn, 6 if stalled is not None else 2)
    answered = got.count(b"HTTP/1.1 200 ")
    assert answered == len(requests), f"{answered} of {len(requests)} answered: {got[-300:]!r}"
    if stalled is None:
        assert b" 408 " not in got and not closed, f"closed: {closed}; {got[-300:]!r}"
    else:
        assert got.endswith(TIMEOUT_ANSWER[-40:]) and closed, f"closed: {closed}; {got[-300:]!r}"


# --- HTTP/2 (serve --http2): a header block or a frame left unfinished on an idle connection ---

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + SettingsFrame(0).serialize()


def h2_block() -> bytes:
    """The HPACK block of a card GET with some padding headers (~2 KiB)."""
    return Encoder().encode([(":method", "GET"), (":scheme", "http"), (":authority", "x"),
                             (":path", "/.well-known/agent-card.json"),
                             *((f"x-pad-{i}", "v" * 50) for i in range(40))])


def h2_request(stream_id: int) -> bytes:
    frame = HeadersFrame(stream_id, data=h2_block(), flags=["END_HEADERS", "END_STREAM"])
    return bytes(frame.serialize())


def continuations(stream_id: int, pieces: int) -> list[bytes]:
    """A request's HEADERS frame holding the block's first bytes, then CONTINUATION frames of a
    few bytes each, the last (END_HEADERS) left out: the header block never ends."""
    block = h2_block()
    first = HeadersFrame(stream_id, data=block[:8], flags=["END_STREAM"])
    return [first.serialize(), *(ContinuationFrame(stream_id, data=block[8 + i:9 + i]).serialize()
                                 for i in range(pieces))]


async def test_h2_a_header_block_left_unfinished_gets_goaway_and_is_closed() -> None:
    """A HEADERS frame whose CONTINUATION frames trickle: the connection was held until the
    75 s idle timer (or h2's cap of 64 CONTINUATION frames, whichever came first)."""
    async with server(header_timeout=0.5, http2=True) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            await conn.send(PREFACE)
            pieces = continuations(1, 50)  # 50 x 50 ms: 2.5 s, five deadlines
            got, sent = await trickled_until_closed(conn, pieces)
    goaways = [f for f in _frames(got) if isinstance(f, GoAwayFrame)]
    assert sent < len(pieces) and goaways, (
        f"{sent} of {len(pieces)} frames went through; the server sent {got[-200:]!r}")
    assert b"deadline" in goaways[-1].additional_data, goaways[-1]


async def test_h2_a_frame_trickled_a_byte_at_a_time_is_cut_at_the_deadline() -> None:
    async with server(header_timeout=0.5, http2=True) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            await conn.send(PREFACE)
            request = h2_request(1)
            got, sent = await trickled_until_closed(conn, [bytes([b]) for b in request[:-1]])
    assert sent < len(request) - 1, "the whole trickle went through: no deadline cut it"
    assert any(isinstance(f, GoAwayFrame) for f in _frames(got)), got[-200:]


async def test_h2_an_idle_connection_and_a_frame_that_completes_are_not_cut() -> None:
    """A request answered, then a PING in two reads (the deadline starts, then the frame is
    whole and the connection idle again): still open after three deadlines, and it answers."""
    async with server(header_timeout=0.5, http2=True) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            await conn.send(PREFACE + h2_request(1))
            first, _ = await read_for(conn, 0.5)
            ping = PingFrame(0, opaque_data=b"12345678").serialize()
            await conn.send(ping[:5])
            await anyio.sleep(0.2)
            await conn.send(ping[5:])
            idle, closed = await read_for(conn, 1.5)
            assert not closed and not any(isinstance(f, GoAwayFrame) for f in _frames(idle)), (
                f"closed: {closed}; frames {_frames(idle)}")
            await conn.send(h2_request(3))
            second, _ = await read_for(conn, 1.0)
    statuses = _statuses(first + idle + second)  # one byte stream: one HPACK table
    assert statuses == {1: 200, 3: 200}, _frames(first + idle + second)


async def test_h2_each_trickled_request_has_its_own_deadline() -> None:
    """A request whose frame trickles but completes within the deadline is answered; the next
    request trickled on the same connection has a deadline of its own. It had none: the first
    one's was taken as still running (its key, hypercorn's request count, stays 0 under
    hypercorn_h2), so the second was held for the 75 s idle timer."""
    async with server(header_timeout=0.5, http2=True) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            await conn.send(PREFACE)
            first = h2_request(1)
            await conn.send(first[:20])
            await anyio.sleep(0.2)
            await conn.send(first[20:])
            answered, _ = await read_for(conn, 0.5)
            second = h2_request(3)
            got, sent = await trickled_until_closed(conn, [bytes([b]) for b in second[:-1]])
    assert _statuses(answered).get(1) == 200, _frames(answered)
    assert sent < len(second) - 1 and any(isinstance(f, GoAwayFrame) for f in _frames(got)), (
        f"{sent} of {len(second) - 1} bytes of the second request went through; "
        f"frames: {_frames(got)[-3:]}")


def _frames(data: bytes) -> list[Any]:
    """The frames in ``data`` (a server's bytes after the preface); a cut last one left out."""
    frames = []
    while len(data) >= 9:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        if len(data) < 9 + length:
            break
        frame.parse_body(memoryview(data[9:9 + length]))
        frames.append(frame)
        data = data[9 + length:]
    return frames


def _statuses(data: bytes) -> dict[int, int]:
    """Each stream's response status in ``data``."""
    decoder = Decoder()
    return {frame.stream_id: int(dict(decoder.decode(frame.data))[":status"])
            for frame in _frames(data) if isinstance(frame, HeadersFrame)}


async def test_h2_a_connection_that_sent_only_its_preface_is_closed_when_idle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP/2 prior-knowledge connection that opens no stream gets the idle timer an
    HTTP/1.1 connection has. It had none: hypercorn stops the timer on the preface, parsed as
    an HTTP/1.1 request, and only a stream's end restarted it; measured, a connection that
    sent its preface (and a PING now and then) was held past 85 s of a 75 s timer."""
    import scoped_a2a.server.serve as serve_module

    monkeypatch.setattr(serve_module, "KEEP_ALIVE_TIMEOUT", 0.5)
    async with server(header_timeout=0.5, http2=True) as port:
        conn = await anyio.connect_tcp("127.0.0.1", port)
        async with conn:
            await conn.send(PREFACE)
            got, closed = await read_for(conn, 3)
    assert closed, f"open 3 s after the preface (idle timer 0.5 s); frames {_frames(got)}"
