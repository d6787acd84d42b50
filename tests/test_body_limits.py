"""Request bodies that never end: the body deadline and the server-wide bound on the bytes of
unfinished bodies (:class:`scoped_a2a.server.body.BodyBudget`), for every binding.

Found by the gRPC hostile probe: a client that sent most of a 4 MB body on each of 50 HTTP/2
streams and never the end took the server from 47 to 254 MB, held for as long as the connection
lived. The unit tests drive ``read_body`` with scripted ASGI messages; the process tests speak
raw HTTP/1.1 and raw HTTP/2 to a ``serve`` process on each backend.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import h2.events
import httpx
import pytest

from scoped_a2a.server.body import (
    BodiesOverBudget,
    BodyBudget,
    BodyTooSlow,
    ClientGone,
    read_body,
)

from .h2client import RawH2
from .test_cli import start, stopped_cleanly

KIB = 1 << 10


def _script(*pieces: bytes, then_wait: bool = False) -> Any:
    """An ASGI ``receive`` handing out ``pieces`` (the last one ends the body unless
    ``then_wait``: then it waits forever after them, as a client that never sends the end)."""
    queue = list(pieces)

    async def receive() -> dict[str, Any]:
        if not queue:
            await anyio.sleep_forever()
        chunk = queue.pop(0)
        return {"type": "http.request", "body": chunk,
                "more_body": bool(queue) or then_wait}

    return receive


@pytest.mark.anyio
async def test_a_whole_body_is_read_and_its_bytes_given_back() -> None:
    budget = BodyBudget(max_bytes=1 << 20, timeout=5)
    pieces = [b"a" * (100 * KIB)] * 3
    seen: list[int] = []
    receive = _script(*pieces)

    async def watching() -> dict[str, Any]:
        seen.append(budget.held)
        return await receive()

    body = await read_body({"headers": []}, watching, 1 << 20, budget=budget)
    assert body == b"".join(pieces)
    # Held across the waits: nothing, then 100 KiB beyond the free 64 KiB, then 200 KiB.
    assert seen == [0, 100 * KIB - BodyBudget.FREE_BYTES, 200 * KIB - BodyBudget.FREE_BYTES]
    assert budget.held == 0


@pytest.mark.anyio
async def test_a_body_past_the_budget_is_refused_and_holds_nothing() -> None:
    budget = BodyBudget(max_bytes=300 * KIB, timeout=1.0)
    async with anyio.create_task_group() as tg:
        # One body within the budget waits for its end, holding 236 KiB...
        first = anyio.Event()

        async def hold() -> None:
            with pytest.raises(BodyTooSlow):
                await read_body({"headers": []}, _script(b"y" * (300 * KIB), then_wait=True),
                                1 << 20, budget=budget)
            first.set()

        tg.start_soon(hold)
        await anyio.wait_all_tasks_blocked()
        assert budget.held == 300 * KIB - BodyBudget.FREE_BYTES
        # ...so a second one is refused at once, and counts nothing.
        with pytest.raises(BodiesOverBudget) as refused:
            await read_body({"headers": []}, _script(b"z" * (200 * KIB), b"end"), 1 << 20,
                            budget=budget)
        assert refused.value.http_status == 503
        assert (b"retry-after", b"1") in refused.value.http_headers()
        assert budget.held == 300 * KIB - BodyBudget.FREE_BYTES
        # A body within the free allowance is read whatever the budget holds.
        assert await read_body({"headers": []}, _script(b"s" * KIB, b"end"), 1 << 20,
                               budget=budget) == b"s" * KIB + b"end"
        await first.wait()  # the holder ran out of time: its bytes are given back
        assert budget.held == 0


@pytest.mark.anyio
async def test_a_body_that_never_ends_is_refused_at_its_deadline() -> None:
    budget = BodyBudget(max_bytes=1 << 20, timeout=0.3)
    began = time.monotonic()
    with pytest.raises(BodyTooSlow) as slow:
        await read_body({"headers": []}, _script(b"a" * (200 * KIB), then_wait=True),
                        1 << 20, budget=budget)
    assert 0.25 < time.monotonic() - began < 3
    assert slow.value.http_status == 408 and "0.3 s" in str(slow.value)
    assert budget.held == 0


@pytest.mark.anyio
async def test_a_cancelled_or_abandoned_read_gives_its_bytes_back() -> None:
    budget = BodyBudget(max_bytes=1 << 20, timeout=30)
    with anyio.move_on_after(0.1):
        await read_body({"headers": []}, _script(b"a" * (500 * KIB), then_wait=True),
                        1 << 20, budget=budget)
    assert budget.held == 0
    gone = [b"a" * (500 * KIB)]

    async def hangs_up() -> dict[str, Any]:
        if gone:
            return {"type": "http.request", "body": gone.pop(), "more_body": True}
        return {"type": "http.disconnect"}

    with pytest.raises(ClientGone):
        await read_body({"headers": []}, hangs_up, 1 << 20, budget=budget)
    assert budget.held == 0


# --- a real server ---------------------------------------------------------------------------

@pytest.fixture(params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``serve --grpc`` (HTTP/2 on) with a 3 s body deadline and a 1 MiB bound on unfinished
    bodies."""
    proc, url, log = start("--grpc", "--backend", request.param, "--body-timeout", "3",
                           "--max-body-memory", "1MiB", "--grace", "1")
    try:
        yield url, proc
    finally:
        stopped_cleanly(proc, log)


def _port(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


def _send_body(text: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                    "parts": [{"text": text}]}}}).encode()


def _stalled_http11(port: int, path: str, declared: int, sent: bytes,
                    headers: str = "") -> tuple[int, dict[str, str], bytes, float]:
    """POST declaring ``declared`` bytes, send ``sent`` and nothing more; the answer and
    how long it took to come."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     f"content-length: {declared}\r\n{headers}\r\n".encode() + sent)
        began = time.monotonic()
        raw = b""
        while b"\r\n\r\n" not in raw or len(raw.split(b"\r\n\r\n", 1)[1]) < _length(raw):
            data = sock.recv(65536)
            if not data:
                break
            raw += data
        took = time.monotonic() - began
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), fields, body, took


def _length(raw: bytes) -> int:
    for line in raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b": ")
        if name.lower() == b"content-length":
            return int(value)
    return 1 << 30


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
def test_a_stalled_body_gets_408_on_each_http_binding(
        server: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = server
    port = _port(url)
    with ThreadPoolExecutor(2) as pool:  # both wait out the deadline at once
        jsonrpc = pool.submit(_stalled_http11, port, "/", 200_000, b"{" + b" " * 99_999)
        rest = pool.submit(_stalled_http11, port, "/message:send", 200_000, b"{")
        status, fields, body, took = jsonrpc.result()
        assert status == 408, body
        assert 2.8 < took < 6, took
        error = json.loads(body)["error"]
        assert error["code"] == -32600 and "did not arrive within 3 s" in error["message"], error
        assert fields.get("connection") == "close"
        status, _, body, took = rest.result()
        assert status == 408 and 2.8 < took < 6, (status, body, took)
        assert "did not arrive within 3 s" in json.loads(body)["error"]["message"]
    # ...and the server goes on serving whole bodies.
    answer = httpx.post(url, content=_send_body("still here"),
                        headers={"content-type": "application/json"}, timeout=10)
    assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def _h2_post(client: RawH2, path: str = "/") -> int:
    return client.start(path, "POST", end_stream=False, extra=[
        ("content-type", "application/json")])


def _statuses(events: list[Any]) -> dict[int, int]:
    return {e.stream_id: int(dict(e.headers)[b":status"]) for e in events
            if isinstance(e, h2.events.ResponseReceived)}


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
def test_unfinished_http2_bodies_are_bounded_server_wide_then_released(
        server: tuple[str, subprocess.Popen[str]]) -> None:
    """Twelve streams each send 256 KiB of a body and stop. 1 MiB holds five of them (192 KiB
    counted each); the rest are refused with 503 and Retry-After at once. An ordinary call is
    served meanwhile. At the deadline (3 s) the five get 408, and the budget is free again."""
    url, _ = server
    port = _port(url)
    holder = RawH2(port, window=1 << 20)
    events: list[Any] = []
    streams = []
    try:
        for _ in range(12):
            stream = _h2_post(holder)
            streams.append(stream)
            events += holder.send_body(stream, b" " * (256 * KIB))
        events += holder.read_events(0.3)
        statuses = _statuses(events)
        assert [statuses.get(s) for s in streams] == [None] * 5 + [503] * 7, statuses
        retry = [dict(e.headers).get(b"retry-after") for e in events
                 if isinstance(e, h2.events.ResponseReceived)]
        assert retry == [b"1"] * 7
        # A small body is read whatever the budget holds.
        answer = httpx.post(url, content=_send_body("ordinary"),
                            headers={"content-type": "application/json"}, timeout=5)
        assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        events += holder.read_events(
            6.0, until=lambda new: len(_statuses(events + new)) == len(streams))
        statuses = _statuses(events)
        assert [statuses.get(s) for s in streams] == [408] * 5 + [503] * 7, statuses
    finally:
        holder.close()
    # The budget is free again: a 600 KiB body is taken whole.
    big = _send_body("b" * (600 * KIB))
    client = RawH2(port, window=1 << 20)
    try:
        stream = _h2_post(client)
        got = client.send_body(stream, big, end_stream=True) + client.read_events(3)
        assert _statuses(got).get(stream) == 200, got
    finally:
        client.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
def test_sixty_never_ending_bodies_cost_bounded_memory(
        server: tuple[str, subprocess.Popen[str]]) -> None:
    """60 streams each send 900 KiB of a body and never the end (54 MB offered; before the
    budget the server held all of it for as long as the connection lived). With 1 MiB of
    budget one is held at a time until its deadline; the rest are refused as they come."""
    url, proc = server
    port = _port(url)
    httpx.get(url + "/.well-known/agent-card.json", timeout=5)
    before = _rss_mb(proc.pid)
    client = RawH2(port, window=1 << 20)
    events: list[Any] = []
    streams = []
    try:
        for _ in range(60):
            stream = _h2_post(client)
            streams.append(stream)
            events += client.send_body(stream, b" " * (900 * KIB), timeout=20)
        grown = _rss_mb(proc.pid) - before
        assert grown < 25, f"the server grew {grown:.0f} MB"
        events += client.read_events(
            6.0, until=lambda new: len(_statuses(events + new)) == len(streams))
        statuses = _statuses(events)
        answered = [statuses.get(s) for s in streams]
        # (Once the first is cut off at its deadline, a later one may be held in its place.)
        assert answered[0] == 408 and set(answered) == {408, 503}, statuses
        assert answered.count(503) >= 50, statuses
    finally:
        client.close()


GRPC_SEND = "/lf.a2a.v1.A2AService/SendMessage"


def _grpc_post(client: RawH2, *extra: tuple[str, str]) -> int:
    return client.start(GRPC_SEND, "POST", end_stream=False, extra=[
        ("content-type", "application/grpc"), ("te", "trailers"), *extra])


def _grpc_endings(events: list[Any]) -> dict[int, tuple[int, str]]:
    """Each stream's grpc-status and grpc-message, from its trailers."""
    from urllib.parse import unquote

    found = {}
    for e in events:
        if isinstance(e, h2.events.TrailersReceived):
            fields = dict(e.headers)
            found[e.stream_id] = (int(fields[b"grpc-status"]),
                                  unquote(fields.get(b"grpc-message", b"").decode()))
    return found


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
def test_grpc_messages_that_never_end_get_deadline_exceeded_or_unavailable(
        server: tuple[str, subprocess.Popen[str]]) -> None:
    """The same bounds on gRPC: a message that never ends gets DEADLINE_EXCEEDED at the body
    deadline, or at the call's own grpc-timeout when that comes first; one that would pass the
    bound on unfinished bodies gets UNAVAILABLE (retryable) at once."""
    url, _ = server
    client = RawH2(_port(url), window=1 << 20)
    prefix = b"\x00" + (300 * KIB).to_bytes(4, "big")
    try:
        held = [_grpc_post(client) for _ in range(5)]
        events: list[Any] = []
        for stream in held:
            events += client.send_body(stream, prefix + b"\x00" * (256 * KIB))
        short = _grpc_post(client, ("grpc-timeout", "500m"))
        events += client.send_body(short, prefix + b"\x00" * 1000)
        refused = _grpc_post(client)
        events += client.send_body(refused, prefix + b"\x00" * (256 * KIB))
        events += client.read_events(0.9)
        endings = _grpc_endings(events)
        assert endings.get(refused, (0,))[0] == 14, endings  # UNAVAILABLE
        assert "retry shortly" in endings[refused][1]
        assert endings.get(short, (0,))[0] == 4, endings  # DEADLINE_EXCEEDED, its own
        assert "grpc-timeout (0.5 s)" in endings[short][1], endings[short]
        assert not any(s in endings for s in held), endings
        events += client.read_events(
            6.0, until=lambda new: all(s in _grpc_endings(events + new) for s in held))
        endings = _grpc_endings(events)
        for stream in held:
            status, text = endings[stream]
            assert status == 4 and "did not arrive within 3 s" in text, endings[stream]
        # A message larger than the server can hold at all is too large, not early.
        big = _grpc_post(client)
        events = client.send_body(big, b"\x00" + (2 << 20).to_bytes(4, "big") + bytes(1200 * KIB))
        events += client.read_events(3, until=lambda new: big in _grpc_endings(events + new))
        status, text = _grpc_endings(events)[big]
        assert status == 8 and text == f"the request message exceeds {KIB * 1088} bytes", text
    finally:
        client.close()
