"""``python -m scoped_a2a serve`` as an operator runs it: flags, signals, graceful shutdown."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", *args],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        match = re.search(r"serving on (http://\S+)", line)
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the server did not start")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return err


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_cli_detaches_crm_events_and_shuts_down_gracefully(backend: str) -> None:
    proc, url = start("--backend", backend, "--agent", "tests.cli_agents:one_second",
                      "--detach-metadata", "evoai_crm_event=inactivity_action,new_lead",
                      "--grace", "5", "--public-url", "https://agents.example/a2a/")
    try:
        with httpx.Client(timeout=5) as client:
            for _ in range(100):
                try:
                    card = client.get(url + ".well-known/agent-card.json").json()
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            assert card["url"] == "https://agents.example/a2a/"
            assert card["supportedInterfaces"][0]["url"] == "https://agents.example/a2a/"
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": {"messageId": "m", "role": "ROLE_USER",
                                           "parts": [{"text": "lead 42"}]},
                               "metadata": {"evoai_crm_event": "inactivity_action"}}}
            with pytest.raises(httpx.ReadTimeout):
                # The CRM hangs up 80 ms after sending (connecting may take longer under load).
                client.post(url, json=body, timeout=httpx.Timeout(5, read=0.08))
            time.sleep(0.2)
    finally:
        err = stop(proc)  # SIGTERM while the detached run is in flight
    assert proc.returncode == 0, err
    assert "SIGTERM: shutting down gracefully" in err
    assert re.search(r"run end task=\w+ outcome=completed .*reason=completed", err), err


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_cli_records_runs_cut_short_by_shutdown(backend: str) -> None:
    proc, url = start("--backend", backend, "--grace", "0.2")
    try:
        with httpx.Client(timeout=5) as client:
            for _ in range(100):
                try:
                    client.get(url + ".well-known/agent-card.json")
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            sent = client.post(url, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": {"messageId": "m", "role": "ROLE_USER",
                                       "parts": [{"text": "slow 30"}]},
                           "configuration": {"returnImmediately": True}}}).json()
            assert sent["result"]["task"]["id"]
            time.sleep(0.2)
    finally:
        err = stop(proc, signal.SIGINT)
    assert proc.returncode == 0, err
    assert re.search(r"run end task=\w+ outcome=canceled .*reason=shutdown", err), err


def test_serve_cli_rejects_a_bad_agent_spec() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scoped_a2a", "serve", "--agent", "no_such_module:x"],
        cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "cannot import agent module 'no_such_module'" in proc.stderr
