"""The ``serve`` fixture of the SQLite process tests: ``serve --store sqlite:<tmp>/tasks.db``.

Imported by the test modules that use it (``from .sqlite_serving import sqlite_serve``); the
fixture's name there is ``serve``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .redis.conftest import Proc

AGENT = "tests.redis.agents:probe_agent"


@pytest.fixture(name="serve")
def sqlite_serve(tmp_path: Path, anyio_backend: str) -> Iterator[Callable[..., Proc]]:
    """``serve(*args)``: a server process on the test's backend over one SQLite file in
    ``tmp_path`` (each call starts another process on the same file). The agent is ``AGENT``
    unless ``args`` name one; webhooks on 127.0.0.1 are allowed (the tests' receivers). Every
    process is stopped at the end."""
    procs: list[Proc] = []

    def start(*args: str) -> Proc:
        log = tmp_path / f"serve-{len(procs)}.log"
        if "--agent" not in args:
            args = ("--agent", AGENT, *args)
        proc = Proc(["serve", "--backend", anyio_backend, "--port", "0",
                     "--store", f"sqlite:{tmp_path / 'tasks.db'}", "--log-level", "INFO",
                     "--grace", "1", "--allow-webhook-host", "127.0.0.1", *args], log)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.stop()
