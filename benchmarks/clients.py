"""Client-side systems (scenarios 4 and 6): step runners, each in its own process.

A client system is a way of running steps: scoped-a2a's ``Step`` on asyncio or trio, or the old
asyncio pattern (:mod:`benchmarks.oldstep`). All run on Python 3.11, where the old pattern's
``asyncio.wait_for`` is the one that swallows cancellations. :func:`run_client` starts
``python -m benchmarks.steprunner`` and collects its JSON lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .systems import REPO


@dataclass(frozen=True, slots=True)
class ClientSystem:
    name: str
    backend: str
    pattern: str  # scoped | old
    loop: str  # asyncio | trio
    role: str


CLIENTS = [
    ClientSystem("scoped-a2a Step", "asyncio, Python 3.11", "scoped", "asyncio", "subject"),
    ClientSystem("scoped-a2a Step", "trio, Python 3.11", "scoped", "trio", "subject"),
    ClientSystem("old pattern (wait_for poll loop)", "asyncio, Python 3.11", "old", "asyncio",
                 "peer"),
]


def find_python311(explicit: str | None = None) -> str | None:
    """A Python 3.11 interpreter: ``explicit``, this one if it is 3.11, or one on the PATH."""
    if explicit:
        return explicit
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    for candidate in (os.environ.get("BENCH_PY311"), shutil.which("python3.11")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


async def run_client(python: str, env: dict[str, str], client: ClientSystem, url: str,
                     args: list[str], *, timeout: float) -> list[dict[str, Any]]:
    """Run one step-runner process to the end; return its JSON records.

    Raises RuntimeError (with its stderr) if it fails or overruns ``timeout`` (it is killed).
    """
    argv = [python, "-m", "benchmarks.steprunner", "--pattern", client.pattern, "--backend",
            client.loop, "--url", url, *args]
    proc = await asyncio.create_subprocess_exec(*argv, cwd=REPO, env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                stdin=subprocess.DEVNULL)
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"{client.name} ({client.backend}) ran over {timeout:.0f}s") from None
    records = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    errors = [r["error"] for r in records if "error" in r]
    if proc.returncode != 0 or errors:
        tail = "\n".join(err.decode(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{client.name} ({client.backend}) failed: {errors or ''}\n{tail}")
    return records
