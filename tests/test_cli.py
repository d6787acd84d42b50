"""``python -m scoped_a2a serve`` as an operator runs it: flags, signals, graceful shutdown."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


class StderrLog:
    """The server's stderr, read line by line in a thread so a test can wait for a line."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self.closed = False
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def text(self) -> str:
        with self.changed:
            return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 20) -> re.Match[str]:
        """The first match of ``pattern`` in the log (fails if the log ends or time is up)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                match = re.search(pattern, "".join(self.lines))
                if match:
                    return match
                left = deadline - time.monotonic()
                if self.closed or left <= 0:
                    raise AssertionError(f"no {pattern!r} in the server's log:\n{self.text()}")
                self.changed.wait(left)


def start(*args: str, ready_timeout: float = 20) -> tuple[subprocess.Popen[str], str, StderrLog]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", *args],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = StderrLog(proc.stderr)
    try:
        url = log.wait_for(r"serving on (http://\S+)", ready_timeout).group(1)
    except AssertionError:
        proc.kill()
        raise
    return proc, url, log


def stop(proc: subprocess.Popen[str], log: StderrLog, sig: int = signal.SIGTERM) -> str:
    proc.send_signal(sig)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    log.reader.join(5)
    return log.text()


def stopped_cleanly(proc: subprocess.Popen[str], log: StderrLog) -> str:
    """Stop a server at the end of a test: one that does not stop within its grace fails the
    test (and is killed, so a frozen server does not hang CI), and so does a traceback in its
    log. Returns the log."""
    try:
        text = stop(proc, log)
    except subprocess.TimeoutExpired:
        pytest.fail("the server did not stop (frozen?)")
    assert "Traceback" not in text, text
    return text


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_cli_detaches_crm_events_and_shuts_down_gracefully(backend: str) -> None:
    proc, url, log = start("--backend", backend, "--agent", "tests.cli_agents:one_second",
                      "--detach-metadata", "evoai_crm_event=inactivity_action,new_lead",
                      "--grace", "5", "--public-url", "https://agents.example/a2a/")
    try:
        with httpx.Client(timeout=5) as client:
            # "serving on" comes once the server answers (serve.py): no retry needed.
            card = client.get(url + ".well-known/agent-card.json").json()
            assert card["url"] == "https://agents.example/a2a/"
            assert card["supportedInterfaces"][0]["url"] == "https://agents.example/a2a/"
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": {"messageId": "m", "role": "ROLE_USER",
                                           "parts": [{"text": "lead 42"}]},
                               "metadata": {"evoai_crm_event": "inactivity_action"}}}
            with pytest.raises(httpx.ReadTimeout):
                # The CRM hangs up 80 ms after sending (connecting may take longer under load).
                client.post(url, json=body, timeout=httpx.Timeout(5, read=0.08))
            log.wait_for(r"run start task=")
    finally:
        err = stop(proc, log)  # SIGTERM while the detached run is in flight
    assert proc.returncode == 0, err
    assert "SIGTERM: shutting down gracefully" in err
    assert re.search(r"run end task=\w+ outcome=completed .*reason=completed", err), err


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_cli_records_runs_cut_short_by_shutdown(backend: str) -> None:
    proc, url, log = start("--backend", backend, "--grace", "0.2")
    try:
        with httpx.Client(timeout=5) as client:
            sent = client.post(url, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": {"messageId": "m", "role": "ROLE_USER",
                                       "parts": [{"text": "slow 30"}]},
                           "configuration": {"returnImmediately": True}}}).json()
            assert sent["result"]["task"]["id"]
            log.wait_for(r"run start task=")
    finally:
        err = stop(proc, log, signal.SIGINT)
    assert proc.returncode == 0, err
    assert re.search(r"run end task=\w+ outcome=canceled .*reason=shutdown", err), err


def test_serve_cli_rejects_a_bad_agent_spec() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scoped_a2a", "serve", "--agent", "no_such_module:x"],
        cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "cannot import agent module 'no_such_module'" in proc.stderr
