"""Hostile HTTP/2 clients against a real ``python -m scoped_a2a serve --http2`` process, on both
backends, speaking raw HTTP/2 (the ``h2`` package hypercorn depends on) over a plain socket.

- A flood of PRIORITY frames for streams never opened ended a trio server
  (``TooManyStreamsError``); now the connection gets GOAWAY ``ENHANCE_YOUR_CALM``, the server
  serves on and exits 0 on SIGTERM with no traceback.
- Rapid reset (CVE-2023-44487): streams opened and reset at once are bounded per connection
  (GOAWAY ``ENHANCE_YOUR_CALM`` past the budget); a client that resets now and then is served.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h2.errors
import h2.events
import h2.settings
import pytest
from hyperframe.frame import PriorityFrame

from scoped_a2a.server.hypercorn_h2 import CALM_BURST

from .h2client import RawH2

BACKENDS = ["asyncio", "trio"]
CARD = "/.well-known/agent-card.json"


@contextlib.contextmanager
def server_process(backend: str, tmp_path: Path, *extra: str) -> Iterator[tuple[Any, int, Path]]:
    """``python -m scoped_a2a serve --http2 --port 0``: (process, port, its stderr file).

    On exit it gets SIGTERM; the caller checks the exit status and the log."""
    log = tmp_path / f"server-{backend}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scoped_a2a", "serve", "--backend", backend, "--port", "0",
             "--http2", "--log-level", "INFO", *extra],
            stdout=subprocess.DEVNULL, stderr=err, env=os.environ.copy())
    try:
        port = 0
        deadline = time.monotonic() + 30
        while not port:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            found = re.search(r"serving on http://127\.0\.0\.1:(\d+)/", log.read_text())
            if found:
                port = int(found.group(1))
            else:
                time.sleep(0.05)
        yield proc, port, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def stop(proc: Any, log: Path) -> str:
    """SIGTERM the server; it must exit 0 having logged no traceback. Its log."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    return text


def goaway(events: list[Any]) -> h2.events.ConnectionTerminated:
    [terminated] = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
    return terminated


def card_status(port: int) -> int:
    client = RawH2(port)
    try:
        return client.status(client.start(CARD))
    finally:
        client.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_priority_flood_gets_goaway_and_the_server_serves_on(backend: str,
                                                               tmp_path: Path) -> None:
    """1,100 PRIORITY frames for distinct streams no request opened (15 KB on one connection):
    hypercorn put each in its priority tree (cap 1,000) and the 1,001st ended a trio server
    (exit 1) or dropped the connection with an unhandled-exception log on asyncio."""
    with server_process(backend, tmp_path) as (proc, port, log):
        client = RawH2(port)
        client.sock.sendall(b"".join(
            PriorityFrame(2 * i + 1, depends_on=0, stream_weight=15).serialize()
            for i in range(1, 1101)))
        terminated = goaway(client.events_until_closed())
        client.close()
        assert terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert proc.poll() is None
        assert card_status(port) == 200
        stop(proc, log)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rapid_reset_is_bounded_per_connection(backend: str, tmp_path: Path) -> None:
    """3,000 streams opened and reset at once: past the connection's budget the server sends
    GOAWAY ``ENHANCE_YOUR_CALM`` and processes nothing after it (before: every stream started a
    request, and on both backends the reset streams overflowed hypercorn's priority tree). A
    client that resets fewer streams than the budget is served on the same connection."""
    with server_process(backend, tmp_path) as (proc, port, log):
        client = RawH2(port)
        for _ in range(3000):
            stream = client.headers(CARD)
            client.conn.reset_stream(stream)
        with contextlib.suppress(OSError):  # the server may close before reading it all
            client.flush()
        terminated = goaway(client.events_until_closed())
        client.close()
        assert terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert proc.poll() is None

        polite = RawH2(port)
        for _ in range(CALM_BURST // 2):
            polite.conn.reset_stream(polite.headers(CARD))
        polite.flush()
        assert polite.status(polite.start(CARD)) == 200
        polite.close()
        stop(proc, log)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.one_python("3.11")  # suite time: one Python is enough
def test_a_client_granting_no_window_is_cut_off_like_a_slow_reader(backend: str,
                                                                   tmp_path: Path) -> None:
    """20 ``SubscribeToTask`` streams on one HTTP/2 connection that grants no flow-control
    window, on a task whose snapshot is 1 MiB. hypercorn's ``send()`` never waited for the
    window, so every stream's bytes piled up in its buffers and no write deadline fired (none
    was cut off in 42 s). Now each stream is ended within ``--stream-write-timeout`` (2 s
    here): the client gets RST_STREAM for every one, the server logs them as slow consumers,
    and the connection still serves a request that reads."""
    import json
    import uuid

    with server_process(backend, tmp_path, "--stream-write-timeout", "2") as (proc, port, log):
        import httpx

        sent = httpx.post(f"http://127.0.0.1:{port}/", timeout=30, headers={"A2A-Version": "1.0"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                              "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                                          "parts": [{"text": "slow 60 " + "x" * (1 << 20)}]},
                              "configuration": {"returnImmediately": True}}})
        task_id = sent.json()["result"]["task"]["id"]
        rpc_headers = [("content-type", "application/json"), ("a2a-version", "1.0")]
        before = rss_mib(proc.pid)

        stingy = RawH2(port, window=0)
        subscribe = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                                "params": {"id": task_id}}).encode()
        streams = set()
        for _ in range(20):
            sid = stingy.headers("/", "POST", end_stream=False, extra=rpc_headers)
            stingy.conn.send_data(sid, subscribe, end_stream=True)
            streams.add(sid)
        stingy.flush()
        reset: set[int] = set()
        stingy.sock.settimeout(1.0)
        deadline = time.monotonic() + 20  # the 2 s timeout, plus slack for a loaded machine
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
        after = rss_mib(proc.pid)
        print(f"\n{backend}: RSS before {before:.0f} MiB, peak {peak:.0f}, after {after:.0f}")
        assert reset == streams, f"{len(streams - reset)} of 20 streams still open"
        # The same connection still serves a request it reads (the window opened for it).
        stingy.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})
        assert stingy.status(stingy.start(CARD)) == 200
        stingy.close()
        text = stop(proc, log)
        assert text.count("closed a stream whose client stopped reading") == 20
