"""The CLI's client commands against servers we did not write, and when the server dies (issue 30).

Real processes: the official a2a-sdk server (tests/sdk_agent.py) and our own ``serve``; the CLI
runs as ``python -m scoped_a2a`` on each backend.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from .helpers import free_port
from .test_abandon_peers import SCRIPT, wait_for_card
from .test_cli import ROOT, start, stopped_cleanly

BACKENDS = ["asyncio", "trio"]


@pytest.fixture(scope="module")
def sdk_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--port", str(port), "--rest"])
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_card(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "scoped_a2a", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def journal(url: str, task_id: str) -> dict[str, float]:
    entries: dict[str, dict[str, float]] = httpx.get(url + "journal").json()
    return entries.get(task_id, {})


def assert_one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["blocking", "--stream", "--follow"])
def test_cli_follow_up_on_the_sdk(sdk_url: str, backend: str, mode: str) -> None:
    first = cli("send", sdk_url, "ask me", "--backend", backend)
    assert first.returncode == 0, first.stderr
    found = re.search(r"--task-id (\S+) --context-id (\S+)", first.stderr)
    assert found, first.stderr
    extra = [] if mode == "blocking" else [mode]
    second = cli("send", sdk_url, "slow answer", "--task-id", found[1], "--context-id",
                 found[2], "--backend", backend, *extra)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "completed" in second.stdout and "chunk2" in second.stdout, second.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_timeout_cancels_the_sdk_task_and_says_so(sdk_url: str, backend: str) -> None:
    done = cli("send", sdk_url, "marathon", "--timeout", "1", "--backend", backend)
    assert done.returncode == 124, done.stderr
    line = assert_one_line(done.stderr)
    found = re.search(r"task (\S+) was canceled \(CancelTask acknowledged\)", line)
    assert found, line
    assert "cancelled" in journal(sdk_url, found[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_timeout_of_a_detached_send_says_the_run_goes_on(sdk_url: str, backend: str) -> None:
    done = cli("send", sdk_url, "long detached", "--timeout", "1", "--backend", backend,
               "--metadata", "onDisconnect=continue")
    assert done.returncode == 124, done.stderr
    line = assert_one_line(done.stderr)
    found = re.search(r"task (\S+) goes on: the caller asked onDisconnect: continue; see it "
                      r"with '.* get .*' or '.* subscribe .*'", line)
    assert found, line
    time.sleep(0.3)
    assert "cancelled" not in journal(sdk_url, found[1])
    cancelled = cli("cancel", sdk_url, found[1])
    assert cancelled.returncode == 0, cancelled.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_interrupted_send_cancels_the_sdk_task(sdk_url: str, backend: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "send", sdk_url, "marathon", "--stream",
         "--backend", backend], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the task's first event: it exists
    assert first, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    line = assert_one_line(stderr)
    found = re.search(r"interrupted: the call was abandoned; task (\S+) was canceled", line)
    assert found, line
    assert "cancelled" in journal(sdk_url, found[1])


def test_cli_cancel_exits_0_only_for_a_canceled_task(sdk_url: str) -> None:
    done = cli("send", sdk_url, "hello", "--json")
    assert done.returncode == 0, done.stderr
    task_id = re.search(r'"id":"([^"]+)"', done.stdout.splitlines()[-1])
    assert task_id, done.stdout
    again = cli("cancel", sdk_url, task_id[1])
    assert again.returncode == 4, again.stdout + again.stderr
    assert f"task {task_id[1]} is completed, not canceled" in again.stderr


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["blocking", "--stream", "--follow"])
def test_cli_when_the_server_dies_mid_send(backend: str, mode: str) -> None:
    """One line naming the task and what to run next, exit 3 (it was ~60 lines of traceback
    and exit 1)."""
    proc, url, log = start("--backend", backend)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    extra = [] if mode == "blocking" else [mode]
    client = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "send", url, "slow 30", "--backend", backend,
         *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while "working" not in httpx.post(url, json={
                "jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                headers={"A2A-Version": "1.0"}).text.lower():
            assert time.monotonic() < deadline, "the send never started its task"
            time.sleep(0.05)
        proc.kill()
        proc.wait(10)
        _, stderr = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
        if proc.poll() is None:
            stopped_cleanly(proc, log)
    assert client.returncode == 3, stderr[-3000:]
    line = assert_one_line(stderr)
    assert re.search(r"error: lost the agent at \S+ during task \S+: .*; see it with "
                     r"'.* get \S+ \S+' or '.* subscribe \S+ \S+'", line), line

