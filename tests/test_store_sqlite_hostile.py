"""Hostile probes of ``serve --store sqlite:PATH`` as real processes (both backends).

Each test is one way of breaking a promise of the SQLite store (docs/stores.md) that an earlier
probe found broken: the key file that seals push configs, ...
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from .helpers import rpc, text_message
from .redis.conftest import ROOT, Proc

pytestmark = pytest.mark.anyio
AGENT = "tests.redis.agents:probe_agent"
DETACHED = {"returnImmediately": True}


@pytest.fixture
def serve(tmp_path: Path, anyio_backend: str) -> Iterator[Callable[..., Proc]]:
    """``serve(*args)``: ``serve --store sqlite:<tmp>/tasks.db`` on the test's backend."""
    procs: list[Proc] = []

    def start(*args: str) -> Proc:
        log = tmp_path / f"serve-{len(procs)}.log"
        proc = Proc(["serve", "--backend", anyio_backend, "--port", "0", "--agent", AGENT,
                     "--store", f"sqlite:{tmp_path / 'tasks.db'}", "--log-level", "INFO",
                     "--grace", "1", "--allow-webhook-host", "127.0.0.1", *args], log)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.stop()


def _start_once(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--agent", AGENT,
         "--store", f"sqlite:{tmp_path / 'tasks.db'}"],
        capture_output=True, text=True, timeout=15, cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "PATH": "/usr/bin:/bin"})


async def test_a_lost_or_exposed_key_file_is_refused_in_one_line(
    serve: Callable[..., Proc], tmp_path: Path,
) -> None:
    """Push configs are sealed with ``<file>.key``. Found: with the key file gone, the next
    start made a new key silently, and every stored push config then failed its seal; and a
    key file readable by other users was used as it was. Both are now one line, exit 2, and
    nothing on disk changes."""
    key = tmp_path / "tasks.db.key"
    async with httpx.AsyncClient(timeout=30) as client:
        first = serve()
        url = await first.url()
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("first-sleep 30"),
            "configuration": {**DETACHED, "taskPushNotificationConfig": {
                "url": "http://127.0.0.1:9/hook", "token": "secret-token"}}})
        assert "result" in sent, sent
        first.kill()
    sealed = key.read_bytes()
    key.unlink()
    done = _start_once(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "key file" in lines[0], done.stderr
    assert not key.exists()
    key.write_bytes(b"\x00" * len(sealed))  # another key of the right size
    key.chmod(0o600)
    done = _start_once(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "key file" in lines[0], done.stderr
    key.write_bytes(sealed)
    key.chmod(0o644)
    done = _start_once(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "chmod 600" in lines[0], done.stderr
    key.chmod(0o600)
    again = serve()
    url = await again.url()
    async with httpx.AsyncClient(timeout=30) as client:
        got = await rpc(client, url, "ListTaskPushNotificationConfigs",
                        {"taskId": sent["result"]["task"]["id"]})
    assert got["result"]["configs"][0]["token"] == "secret-token", got
