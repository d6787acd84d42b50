"""Fixtures for the Redis tests: a real redis-server, and server/worker processes.

``redis_server`` starts Debian's ``redis-server`` on a free loopback port with its append-only
file on (``appendfsync always``, so an acknowledged write survives SIGKILL) in the test's tmp
dir; tests can kill and restart it from that file. ``spawn`` starts ``python -m scoped_a2a
serve|worker`` processes on the test's backend and stops them afterwards. Tests skip only when
redis-server is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from ..helpers import free_port

REDIS_SERVER = shutil.which("redis-server")
ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.redis.agents:probe_agent"


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server process with its data (append-only file) in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--appendonly", "yes", "--appendfsync", "always",
             "--save", "", "--daemonize", "no", "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not start on {self.port}:\n{log}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: no shutdown save; only what the append-only file holds survives."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server, "
                    "or scripts/install-system-deps)")
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Proc:
    """A ``python -m scoped_a2a ...`` process whose log goes to a file."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                             env.get("PYTHONPATH", "")])
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "scoped_a2a", *args], stdout=out, stderr=out,
                stdin=subprocess.DEVNULL, env=env, cwd=ROOT,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Wait until the log matches ``pattern``; fail with the log if the process exits."""
        with anyio.fail_after(timeout):
            while True:
                m = re.search(pattern, self.text())
                if m:
                    return m
                if self.popen.poll() is not None:
                    raise AssertionError(f"{self.args} exited {self.popen.returncode}:\n"
                                         f"{self.text()[-3000:]}")
                await anyio.sleep(0.05)

    async def url(self) -> str:
        return (await self.wait_for(r"serving on (http://\S+/)")).group(1)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def spawn(tmp_path: Path, anyio_backend: str) -> Iterator[Callable[..., Proc]]:
    """``spawn("serve" | "worker", *args)``: a process on the test's backend, stopped at the end."""
    procs: list[Proc] = []

    def start(command: str, *args: str) -> Proc:
        log = tmp_path / f"{command}-{len(procs)}.log"
        proc = Proc([command, "--backend", anyio_backend, "--agent", AGENT,
                     "--log-level", "INFO", *args], log)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.stop()
