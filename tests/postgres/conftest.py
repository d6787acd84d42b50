"""Fixtures of the PostgreSQL tests: a real PostgreSQL server and ``serve`` processes on it.

``pg_url``: a fresh empty database on the session's server (one per test process, started on
first use from Debian's ``postgresql`` binaries: server.py). ``own_postgres``: a server of the
test's own, for tests that kill or stop it. ``serve``: ``python -m scoped_a2a serve --store
<url>`` processes on the test's backend, sharing one key file, stopped at the end. Tests skip
only when PostgreSQL is not installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..redis.conftest import Proc
from .server import PostgresServer, new_server, shared_server

AGENT = "tests.redis.agents:probe_agent"


@pytest.fixture
def pg_url() -> str:
    return shared_server().database()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = new_server()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def serve(tmp_path: Path, anyio_backend: str) -> Iterator[Callable[..., Proc]]:
    """``serve(url, *args)``: a server process on the test's backend over the PostgreSQL at
    ``url``; the agent is ``AGENT`` unless ``args`` name one. Every process is stopped at the
    end."""
    procs: list[Proc] = []

    def start(url: str, *args: str, command: str = "serve") -> Proc:
        log = tmp_path / f"{command}-{len(procs)}.log"
        if "--agent" not in args:
            args = ("--agent", AGENT, *args)
        port = ["--port", "0"] if command == "serve" else []
        proc = Proc([command, "--backend", anyio_backend, *port, "--store", url,
                     "--postgres-key-file", str(tmp_path / "push.key"), "--log-level", "INFO",
                     "--grace", "1", *args], log)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.stop()
