"""The systems under test, and their server processes.

A system is an A2A implementation (or the bare ASGI ceiling) on one server: scoped-a2a on
hypercorn's trio and asyncio workers and on uvicorn, the official a2a-sdk on uvicorn and on
hypercorn's asyncio worker, fasta2a on uvicorn, and a bare ASGI app on each server. Every system
runs in its own process, started here and always stopped here (SIGTERM, then SIGKILL after a few
seconds), so no run leaves a server behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .loadgen import connect, http_request

REPO = Path(__file__).resolve().parent.parent
SCOPED_AGENT = "benchmarks.agents:bench_agent"
DETACH_RULE = "evoai_crm_event=inactivity_action"
"""The rule scenario 7 serves with: a CRM's fire-and-forget system events run detached."""


@dataclass(frozen=True, slots=True)
class System:
    """One implementation on one server."""

    kind: str  # "scoped" | "sdk" | "fasta2a" | "bare" | "faulty" | "sdk-grpc"
    server: str  # "hypercorn-trio" | "hypercorn-asyncio" | "uvicorn"
    options: tuple[str, ...] = ()
    """Extra command-line options (the faulty agent's fault)."""

    @property
    def name(self) -> str:
        return {"scoped": "scoped-a2a", "sdk": "a2a-sdk", "fasta2a": "fasta2a",
                "bare": "bare ASGI", "faulty": "faulty agent",
                "sdk-grpc": "a2a-sdk gRPC"}[self.kind]

    @property
    def label(self) -> str:
        return f"{self.name} / {self.server}"

    @property
    def is_subject(self) -> bool:
        return self.kind == "scoped"

    def argv(self, python: str, port: int, *, detach_rule: str | None = None) -> list[str]:
        p = str(port)
        rule = ["--detach-metadata", detach_rule] if detach_rule else []
        if self.kind == "scoped" and self.server.startswith("hypercorn"):
            backend = self.server.removeprefix("hypercorn-")
            return [python, "-m", "scoped_a2a", "serve", "--agent", SCOPED_AGENT,
                    "--backend", backend, "--port", p, "--grace", "1", "--log-level", "WARNING",
                    *rule, *self.options]
        module = {"scoped": "scoped_uvicorn", "sdk": "sdk_server", "fasta2a": "fasta2a_server",
                  "bare": "bare_server", "faulty": "fault_proxy",
                  "sdk-grpc": "sdk_grpc_server"}[self.kind]
        extra = ["--agent", SCOPED_AGENT, *rule] if self.kind in ("scoped", "faulty") else []
        return [python, "-m", f"benchmarks.peers.{module}", "--port", p, "--server", self.server,
                *extra, *self.options]


SCOPED = [System("scoped", "hypercorn-trio"), System("scoped", "hypercorn-asyncio"),
          System("scoped", "uvicorn")]
SDK = [System("sdk", "uvicorn"), System("sdk", "hypercorn-asyncio")]
FASTA2A = [System("fasta2a", "uvicorn")]
BARE = [System("bare", "hypercorn-asyncio"), System("bare", "hypercorn-trio"),
        System("bare", "uvicorn")]
# The gRPC rows (benchmarks/grpc_rows.py): scoped-a2a's binding, and the a2a-sdk's grpc.aio.
SCOPED_GRPC = [System("scoped", "hypercorn-trio", ("--grpc",)),
               System("scoped", "hypercorn-asyncio", ("--grpc",))]
SDK_GRPC = [System("sdk-grpc", "grpc.aio")]


try:  # loaded here, not in the forked child: a child must not import (import lock + threads)
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the generator dies, however it dies (Linux)."""
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServerProcess:
    """One running server. ``rss()`` and ``cpu()`` read its /proc entries."""

    def __init__(self, system: System, python: str, workdir: Path, env: dict[str, str],
                 detach_rule: str | None) -> None:
        self.system = system
        self.port = free_port()
        slug = f"{system.kind}-{system.server}-{self.port}"
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = workdir / f"{slug}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.argv = system.argv(python, self.port, detach_rule=detach_rule)
        self.proc = subprocess.Popen(self.argv, cwd=REPO, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=_die_with_parent)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll the agent card until it answers 200; raise with the log's tail if it never does."""
        deadline = time.monotonic() + timeout
        request = http_request(self.port, None, method="GET", path="/.well-known/agent-card.json")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.system.label} exited with {self.proc.returncode}:\n"
                                   + self.log_tail())
            try:
                async with await connect(self.port, timeout=2) as conn:
                    async with asyncio.timeout(5):
                        status, _ = await conn.request(request)
                if status == 200:
                    return
            except (OSError, TimeoutError, ConnectionError):
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.system.label} did not answer within {timeout:.0f}s:\n"
                           + self.log_tail())

    def rss(self) -> int:
        """Resident set size in bytes (VmRSS)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def cpu(self) -> float:
        """CPU seconds (user + system) used so far."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 30) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL (to the whole process group) after ``timeout`` seconds."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
            except ProcessLookupError:
                pass
        self._log.close()


def server_env(signal_port: int, bench_dir: Path) -> dict[str, str]:
    """The environment of every server: the checkout's code first on the path, the side channel."""
    env = dict(os.environ)
    paths = [str(REPO / "src"), str(REPO)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["BENCH_SIGNAL_PORT"] = str(signal_port)
    env["BENCH_DIR"] = str(bench_dir)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def python_for_servers() -> str:
    return sys.executable
