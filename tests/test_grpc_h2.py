"""hypercorn's HTTP/2 layer under gRPC traffic (the work-arounds of server/hypercorn_h2.py):

- E. After ``keep_alive_max_requests`` streams hypercorn closed the connection at once (GOAWAY,
  then nothing more sent), so every call in flight on it was lost: grpcio reported UNAVAILABLE
  for them. Now the connection drains: GOAWAY names the last stream taken, those streams are
  answered, later ones are refused (REFUSED_STREAM, which gRPC clients retry on a new
  connection), and the connection closes once idle. Served here by hypercorn directly, with
  a small cap, as a library user would (``serve`` lifts the cap for HTTP/2 altogether).
- Many streams and a client that stops reading: memory stays bounded, the calls get errors,
  the server serves on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from a2a.types import a2a_pb2 as pb
from hypercorn.config import Config

from scoped_a2a import A2AApp
from scoped_a2a.server import hypercorn_fixes

from .grpc_client import V1, Stub, in_thread, send_request
from .helpers import free_port, served
from .test_grpc import agent
from .test_grpc_hangup import many_calls

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def hypercorn_served(app: A2AApp, **settings: Any) -> AsyncIterator[str]:
    """``app`` served by hypercorn's own ``serve`` (not ours) with these Config settings."""
    hypercorn_fixes.install()
    config = Config()
    port = free_port()
    config.bind = [f"127.0.0.1:{port}"]
    for name, value in settings.items():
        setattr(config, name, value)
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        if _backend() == "trio":
            import hypercorn.trio

            tg.start_soon(lambda: hypercorn.trio.serve(app, config, shutdown_trigger=stop.wait))
        else:
            import hypercorn.asyncio

            tg.start_soon(lambda: hypercorn.asyncio.serve(app, config,
                                                          shutdown_trigger=stop.wait))
        with anyio.fail_after(10):
            await app.ready.wait()
        try:
            yield f"http://127.0.0.1:{port}/"
        finally:
            stop.set()


def _backend() -> str:
    import sniffio

    return sniffio.current_async_library()


async def test_calls_past_keep_alive_max_requests_are_all_answered() -> None:
    app = A2AApp(agent, grpc=True, grace=1.0)
    async with hypercorn_served(app, keep_alive_max_requests=100, graceful_timeout=1) as url:
        stub = Stub(url)
        try:
            task = (await stub("SendMessage", send_request("hi"))).task
            results = await in_thread(lambda: many_calls(stub, task.id, 600, 60))
        finally:
            stub.close()
    errors = [r for r in results if isinstance(r, grpc.RpcError)]
    assert not errors, (len(errors), errors[:2])
    assert len(results) == 600


GRPC_HEADERS = [("content-type", "application/grpc"), ("te", "trailers"),
                ("a2a-version", "1.0")]
PATH = "/lf.a2a.v1.A2AService/"


def grpc_body(message: Any) -> bytes:
    data = message.SerializeToString()
    return b"\x00" + len(data).to_bytes(4, "big") + data


def flood_frames(n: int) -> bytes:
    """The preface and ``n`` gRPC GetTask HEADERS frames (no body), made with hyperframe.

    One header block serves every stream: encoded by a fresh HPACK encoder it refers only to
    the static table and its own literals, so each copy decodes the same (h2's own client
    took 13 s to encode 10,000 requests)."""
    import hpack
    from hyperframe.frame import HeadersFrame, SettingsFrame

    block = hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"),
                                    (":authority", "127.0.0.1"), (":path", PATH + "GetTask"),
                                    *GRPC_HEADERS])
    frames = [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", SettingsFrame(0).serialize()]
    for i in range(n):
        frame = HeadersFrame(2 * i + 1, data=block, flags=["END_HEADERS", "END_STREAM"])
        frames.append(frame.serialize())
    return b"".join(frames)


def frame_types(raw: bytes) -> list[tuple[str, int, bytes]]:
    """(frame type, stream id, payload) of every whole frame in ``raw``."""
    from hyperframe.frame import Frame

    found = []
    at = 0
    while len(raw) - at >= 9:
        frame, length = Frame.parse_frame_header(memoryview(raw[at:at + 9]))
        if len(raw) - at - 9 < length:
            break
        found.append((type(frame).__name__, frame.stream_id, raw[at + 9:at + 9 + length]))
        at += 9 + length
    return found


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ten_thousand_streams_at_once_close_that_connection_only(backend: str,
                                                                 tmp_path: Path) -> None:
    """A client that opens 10,000 gRPC streams at once, ignoring the server's
    ``MAX_CONCURRENT_STREAMS`` (100): its connection is closed with GOAWAY, the server's memory
    stays where it was, and it serves on (and exits 0 with no traceback)."""
    import socket

    from .test_h2_hostile import rss_mib, server_process, stop

    with server_process(backend, tmp_path, "--grpc") as (proc, port, log):
        before = rss_mib(proc.pid)
        raw = b""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as flood:
            with contextlib.suppress(OSError):  # the server may close before reading it all
                flood.sendall(flood_frames(10_000))
            with contextlib.suppress(OSError):
                while chunk := flood.recv(65536):
                    raw += chunk
        kinds = [kind for kind, _, _ in frame_types(raw)]
        print(f"\n{backend}:", {k: kinds.count(k) for k in set(kinds)})
        assert "GoAwayFrame" in kinds, kinds[-5:]
        # At most the streams allowed at once were started (and answered, or reset).
        assert kinds.count("HeadersFrame") <= 2 * 100 + 2
        assert rss_mib(proc.pid) - before < 50
        stub = Stub(f"http://127.0.0.1:{port}/")  # a well-behaved client is still served
        try:
            with pytest.raises(grpc.RpcError) as caught:
                stub.call("GetTask", pb.GetTaskRequest(id="x"))
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        finally:
            stub.close()
        stop(proc, log)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_grpc_client_that_stops_reading_is_cut_off(backend: str, tmp_path: Path) -> None:
    """20 ``SubscribeToTask`` gRPC streams on a connection that grants no flow-control window,
    to a task whose snapshot is 1 MiB: each is reset within ``--stream-write-timeout`` (2 s),
    memory stays bounded, and the server serves on."""
    import h2.events
    import h2.settings

    from .h2client import RawH2
    from .test_h2_hostile import rss_mib, server_process, stop

    with server_process(backend, tmp_path, "--grpc", "--stream-write-timeout", "2",
                        "--grace", "1") as (
            proc, port, log):
        stub = Stub(f"http://127.0.0.1:{port}/")
        big = send_request("slow 60 " + "x" * (1 << 20), return_immediately=True)
        task_id = stub.call("SendMessage", big).task.id
        stub.close()
        before = rss_mib(proc.pid)
        stingy = RawH2(port, window=0)
        streams = set()
        for _ in range(20):
            sid = stingy.headers(PATH + "SubscribeToTask", "POST", end_stream=False,
                                 extra=GRPC_HEADERS)
            stingy.conn.send_data(sid, grpc_body(pb.SubscribeToTaskRequest(id=task_id)),
                                  end_stream=True)
            streams.add(sid)
        stingy.flush()
        reset: set[int] = set()
        stingy.sock.settimeout(1.0)
        deadline = time.monotonic() + 20
        peak = before
        while reset != streams and time.monotonic() < deadline:
            peak = max(peak, rss_mib(proc.pid))
            try:
                data = stingy.sock.recv(65536)
            except TimeoutError:
                continue
            assert data, "the server closed the connection"
            for event in stingy.conn.receive_data(data):
                if isinstance(event, h2.events.StreamReset):
                    reset.add(event.stream_id)
            stingy.flush()
        assert reset == streams, f"{len(streams - reset)} of 20 streams still open"
        print(f"\n{backend}: RSS before {before:.0f} MiB, peak {peak:.0f}")
        assert peak - before < 30, (before, peak)
        stingy.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})
        assert stingy.status(stingy.start("/.well-known/agent-card.json")) == 200
        stingy.close()
        text = stop(proc, log)
        assert text.count("closed a stream whose client stopped reading") == 20


async def test_many_calls_in_flight_do_not_fill_the_priority_tree() -> None:
    """64 gRPC calls in flight on one connection, in closed loops (the benchmark's load), 1,500
    in all: every answered stream leaves hypercorn's priority tree (F). Before, the tree grew
    by one entry per call answered and at 1,000 ``TooManyStreamsError`` ended the connection
    (and the whole server on trio)."""
    import asyncio

    app = A2AApp(agent, grpc=True, grace=1.0)
    async with served(app) as url:

        async def session() -> int:
            from a2a.types.a2a_pb2_grpc import A2AServiceStub

            answered = 0
            async with grpc.aio.insecure_channel(url.split("//")[1].rstrip("/")) as channel:
                stub = A2AServiceStub(channel)
                task = (await stub.SendMessage(send_request("hi"), metadata=V1)).task

                async def caller() -> None:
                    nonlocal answered
                    while answered < 1500:
                        answered += 1
                        got = await stub.GetTask(pb.GetTaskRequest(id=task.id), metadata=V1)
                        assert got.id == task.id

                async with asyncio.TaskGroup() as tg:
                    for _ in range(64):
                        tg.create_task(caller())
            return answered

        answered = await anyio.to_thread.run_sync(lambda: asyncio.run(session()))
    assert answered >= 1500
