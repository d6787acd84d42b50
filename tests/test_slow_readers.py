"""Clients that stop reading a stream: closed by the server, never holding up anyone else.

The misbehaving clients are raw sockets with a small receive buffer that send a request and then
never read (or read a little now and then), against real hypercorn on both workers. A task whose
message is large makes the first event (the snapshot) far bigger than every buffer in between.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import time
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.protocol.dialect import V10_DIALECT, Dialect, Frame
from scoped_a2a.protocol.types import Task, TaskState, TaskStatus, utc_timestamp
from scoped_a2a.server.frames import FrameCache
from scoped_a2a.server.serve import _listen

from .agents import Probe
from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio

TIMEOUT = 1.5
"""The apps' ``stream_write_timeout`` here."""
BIG = "x" * (1 << 20)
"""A 1 MiB message text: the task snapshot every stream starts with is over 1 MiB."""


def _request(port: int, method: str, params: dict[str, Any],
             headers: dict[str, str] | None = None) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": "raw", "method": method,
                       "params": params}).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


async def _connect(port: int, rcvbuf: int) -> socket.socket:
    """A loopback client socket whose receive buffer is set before connecting (so it sticks)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        sock.connect(("127.0.0.1", port))
    await anyio.wait_writable(sock)
    return sock


async def _send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except BlockingIOError:
            await anyio.wait_writable(sock)


async def _read_to_end(sock: socket.socket) -> str:
    """Read what is buffered until the server's close shows: "reset" or "eof"."""
    while True:
        await anyio.wait_readable(sock)
        try:
            if not sock.recv(1 << 16):
                return "eof"
        except ConnectionResetError:
            return "reset"
        except BlockingIOError:
            continue


async def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


async def test_a_stream_whose_client_stops_reading_is_closed_and_its_run_released() -> None:
    """The only holder of an interactive run stops reading: the server closes its stream within
    the write timeout (+5 s), and the run is cancelled with reason hang-up."""
    probe = Probe()
    app = A2AApp(probe.agent(seconds=30, steps=300), stream_write_timeout=TIMEOUT)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        sock = await _connect(port, rcvbuf=4096)
        try:
            await _send_all(sock, _request(port, "SendStreamingMessage",
                                           {"message": text_message(BIG)}))
            await probe.wait_started()
            stuck_at = time.monotonic()
            await _wait_for(lambda: app.open_requests == 0, TIMEOUT + 5,
                            "the stuck stream to be closed")
            assert time.monotonic() - stuck_at < TIMEOUT + 5
            (task_id,) = probe.started
            await _wait_for(lambda: task_id in probe.cancelled, 5, "the run to be cancelled")
            with anyio.fail_after(5):
                assert await _read_to_end(sock) in ("reset", "eof")
        finally:
            sock.close()
        task = (await rpc(client, url, "GetTask", {"id": task_id}))["result"]
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert task["status"]["message"]["metadata"] == {"reason": "hang-up"}
        assert app.runner.active == 0


async def test_a_reading_subscriber_keeps_getting_events_while_another_is_stuck() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=5, steps=50), stream_write_timeout=TIMEOUT)
    async with served(app) as url, httpx.AsyncClient(timeout=30) as client:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message(BIG), "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]
        stuck = await _connect(port, rcvbuf=4096)
        received: list[float] = []
        stuck_closed: list[float] = []
        try:
            await _send_all(stuck, _request(port, "SubscribeToTask", {"id": task_id}))
            await _wait_for(lambda: app.open_requests == 1, 5, "the stuck subscription")

            async def watch_stuck() -> None:
                # The stuck client cannot tell without reading (the kernel's abort sends no
                # reset until it does), so watch the server: its request count drops back to
                # one (the reader) once the stuck stream is closed.
                await _wait_for(lambda: app.open_requests == 2, 5, "the reader")
                await _wait_for(lambda: app.open_requests == 1, TIMEOUT + 5,
                                "the stuck stream to be closed")
                stuck_closed.append(time.monotonic())

            final: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_stuck)
                req = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask",
                       "params": {"id": task_id}}
                async with client.stream("POST", url, json=req) as resp:
                    async for _, event in sse_events(resp):
                        received.append(time.monotonic())
                        final = event["result"]
            with anyio.fail_after(5):
                assert await _read_to_end(stuck) in ("reset", "eof")
        finally:
            stuck.close()
        assert final["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert stuck_closed[0] < received[-1], "the stuck stream outlived the task"
        during = [t for t in received if t < stuck_closed[0]]
        assert len(during) >= 5, "the reader got (almost) nothing while the other was stuck"
        gaps = [b - a for a, b in itertools.pairwise(during)]
        assert max(gaps, default=0) < TIMEOUT, "the reader was held up by the stuck stream"


async def test_a_slow_but_steady_reader_is_not_cut_off() -> None:
    """A client that reads what has arrived every 0.5 s (128 KiB receive buffer) keeps its
    stream, although writing its first event (over 1 MiB) takes far longer than the write
    timeout: progress, not the time a write takes, is what counts.

    (A reader whose receive window stays below the server's next TCP segment for the whole
    timeout, e.g. a 4-32 KiB buffer on loopback, is cut off by the kernel although it takes a
    few bytes meanwhile; docs/streams.md says so.)"""
    probe = Probe()
    app = A2AApp(probe.agent(seconds=2, steps=4), stream_write_timeout=TIMEOUT)
    async with served(app) as url:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        sock = await _connect(port, rcvbuf=128 << 10)
        data = bytearray()
        started = time.monotonic()
        try:
            await _send_all(sock, _request(port, "SendStreamingMessage",
                                           {"message": text_message(BIG)}))
            with anyio.fail_after(120):
                while not data.endswith(b"0\r\n\r\n"):  # the chunked body's end
                    await anyio.sleep(0.5)
                    chunk = _read_some(sock, 256 << 10)
                    assert chunk is not None, "the server closed the slow reader's stream"
                    data += chunk
        finally:
            sock.close()
        assert time.monotonic() - started > 2 * TIMEOUT, "the reader was not slow after all"
        assert b"TASK_STATE_COMPLETED" in data
        assert data.count(b"\nid: ") + data.startswith(b"id: ") >= 1
        assert probe.finished and not probe.cancelled


def _read_some(sock: socket.socket, limit: int) -> bytes | None:
    """Up to ``limit`` bytes already buffered (b"" if none); None once the server has closed."""
    out = bytearray()
    while len(out) < limit:
        try:
            chunk = sock.recv(limit - len(out))
        except BlockingIOError:
            break
        except ConnectionResetError:
            return None
        if not chunk:
            return None if not out else bytes(out)
        out += chunk
    return bytes(out)


def test_accepted_sockets_inherit_the_stall_timeout_and_the_small_send_buffer() -> None:
    """What serve's listener sets is what every accepted connection has (Linux)."""
    user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)
    if user_timeout is None:
        pytest.skip("no TCP_USER_TIMEOUT on this platform")
    listener = _listen("127.0.0.1", 0, stall_timeout=2.5)
    listener.setblocking(True)
    try:
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        with client, conn:
            assert conn.getsockopt(socket.IPPROTO_TCP, user_timeout) == 2500
            assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) <= 2 * (64 << 10)
    finally:
        listener.close()
    plain = _listen("127.0.0.1", 0)
    with plain:
        assert plain.getsockopt(socket.IPPROTO_TCP, user_timeout) == 0


async def test_subscribers_of_one_task_share_one_encoding_of_its_snapshot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Five subscribers of a task holding 1 MiB: its snapshot is encoded once, not five times."""
    encodings: list[int] = []
    original = Dialect.stream_task_frame

    def counting(self: Dialect, task: Any) -> Frame:
        frame = original(self, task)
        encodings.append(len(frame.body))
        return frame

    monkeypatch.setattr(Dialect, "stream_task_frame", counting)
    app = A2AApp(Probe().agent(seconds=5, steps=5))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message(BIG), "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]
        firsts: list[int] = []

        async def subscribe() -> None:
            req = {"jsonrpc": "2.0", "id": 3, "method": "SubscribeToTask",
                   "params": {"id": task_id}}
            async with client.stream("POST", url, json=req) as resp:
                async for _, event in sse_events(resp):
                    firsts.append(len(event["result"]["task"]["history"][0]["parts"][0]["text"]))
                    return

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(subscribe)
        assert firsts == [len(BIG)] * 5
        assert len([n for n in encodings if n > len(BIG)]) == 1, encodings
        await rpc(client, url, "CancelTask", {"id": task_id})


def test_the_frame_cache_is_bounded_by_entries_and_bytes() -> None:
    cache = FrameCache(max_entries=3, max_bytes=1000)
    for pos in range(5):
        task = Task(id="t", context_id="c",
                    status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
                    metadata={"pad": "x" * 100, "pos": pos})
        cache.task(V10_DIALECT, task, pos)
    assert len(cache) == 3
    big = Task(id="b", context_id="c",
               status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
               metadata={"pad": "x" * 700})
    cache.task(V10_DIALECT, big, 0)
    assert len(cache) <= 3 and cache._bytes <= 1000
    huge = msgspec.structs.replace(big, id="h", metadata={"pad": "x" * 5000})
    frame = cache.task(V10_DIALECT, huge, 0)
    assert len(frame.body) > 1000 and cache._bytes <= 1000  # too big to keep: not cached
