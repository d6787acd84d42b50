"""``serve --workers N`` (cli/workers.py): N processes on one port over Redis.

A real supervisor with two workers on the test's backend: both workers take connections (the
kernel spreads them, SO_REUSEPORT); a SIGKILLed worker is started again and serves; SIGTERM
reaches both, which drain their runs in flight (answered ``completed`` within ``--grace``)
and the supervisor exits 0. ``/metrics`` answers for both workers whichever one a scrape
reaches, and keeps counting the runs of the one killed. With the memory or an SQLite store,
``--workers 2`` is one line and exit status 2.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from ..helpers import listen_backlogs, somaxconn, text_message
from .conftest import ROOT, Proc, RedisServer
from .util import post_json

pytestmark = [pytest.mark.anyio, pytest.mark.one_python("3.13")]  # suite time: 3.13 only


async def send(url: str, text: str) -> dict[str, Any]:
    """A blocking send over a new connection (the kernel picks a worker per connection)."""
    answer = await post_json(url, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                   "params": {"message": text_message(text)}},
                             hang_up_after_first_event=False)
    task: dict[str, Any] = answer["result"]["task"]
    return task


async def until(check: Callable[[], bool], proc: Proc, timeout: float = 60) -> None:
    """Wait until ``check()``; fail with the log's tail after ``timeout`` seconds."""
    with anyio.move_on_after(timeout):
        while not check():
            await anyio.sleep(0.05)
        return
    raise AssertionError(proc.text()[-3000:])


async def completed_runs(url: str) -> float:
    """``scoped_a2a_runs_total{outcome="completed"}`` summed over its reasons, from one scrape
    on a new connection (the kernel picks the worker)."""
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(
            max_keepalive_connections=0)) as client:
        page = (await client.get(f"{url}metrics")).text
    return sum(float(v) for v in re.findall(
        r'^scoped_a2a_runs_total\{outcome="completed",[^}]*\} (\S+)$', page, re.M))


def pid_of(task: dict[str, Any]) -> int:
    m = re.search(r"pid=(\d+)", task["status"]["message"]["parts"][0]["text"])
    assert m is not None, task
    return int(m.group(1))


async def test_two_workers_share_the_port_restart_and_drain(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    sup = spawn("serve", "--store", redis_server.url, "--port", "0", "--workers", "2",
                "--grace", "10", "--lease", "2", "--metrics")
    await until(lambda: sup.text().count("serving on") >= 2, sup)
    workers = {int(i): int(p) for i, p in re.findall(r"worker (\d) started \(pid (\d+)\)",
                                                     sup.text())}
    assert len(workers) == 2, sup.text()
    url = (await sup.wait_for(r"serving on (http://\S+/)")).group(1)

    # Both workers take connections.
    seen: set[int] = set()
    sent = 0
    with anyio.fail_after(60):
        while seen != set(workers.values()):
            task = await send(url, "hello")
            sent += 1
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            seen.add(pid_of(task))
            assert seen <= set(workers.values()), (seen, workers)
    # Each worker listens with serve's backlog (the supervisor only holds the port); both have
    # answered, so hypercorn has listened in both.
    backlogs = listen_backlogs(int(url.rstrip("/").rsplit(":", 1)[1]))
    assert backlogs is None or backlogs == [min(1024, somaxconn())] * 2, backlogs
    # /metrics on whichever worker a scrape reaches counts the runs of both.
    for _ in range(6):
        assert await completed_runs(url) == sent, sup.text()[-2000:]

    # A killed worker is started again, and serves.
    os.kill(workers[1], signal.SIGKILL)
    m = await sup.wait_for(rf"worker 1 started \(pid (?!{workers[1]}\))(\d+)\)")
    new_pid = int(m.group(1))
    await until(lambda: sup.text().count("serving on") >= 3, sup)
    assert re.search(rf"worker 1 \(pid {workers[1]}\) exited with status -9; starting it "
                     "again", sup.text()), sup.text()[-3000:]
    with anyio.fail_after(60):
        while True:
            task = await send(url, "hello")
            sent += 1
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            if pid_of(task) == new_pid:
                break
    # ... the killed worker's runs still count (its live gauges went with it).
    for _ in range(4):
        assert await completed_runs(url) == sent, sup.text()[-2000:]

    # SIGTERM reaches both workers: the runs in flight on each are answered, completed.
    answers: list[dict[str, Any]] = []

    async def sleeper() -> None:
        answers.append(await send(url, "sleep 2"))

    before = sup.text().count("mode=interactive")
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(sleeper)
            while sup.text().count("mode=interactive") < before + 12:  # all 12 running
                await anyio.sleep(0.05)
            sup.popen.send_signal(signal.SIGTERM)
        while sup.popen.poll() is None:
            await anyio.sleep(0.05)
    assert sup.popen.returncode == 0, sup.text()[-3000:]
    assert [a["status"]["state"] for a in answers] == ["TASK_STATE_COMPLETED"] * 12
    assert {pid_of(a) for a in answers} == {workers[2], new_pid}  # both drained theirs
    assert "SIGTERM: passing it on to 2 worker(s)" in sup.text()
    assert sup.text().count("SIGTERM: shutting down gracefully") == 2
    assert "second signal" not in sup.text()


@pytest.mark.parametrize("store", ["memory", "sqlite:{tmp}/tasks.db"])
def test_workers_need_a_shared_store(store: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run(
        [sys.executable, "-m", "scoped_a2a", "serve", "--workers", "2", "--port", "0",
         "--store", store.format(tmp=tmp_path)],
        capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and "--workers 2" in done.stderr, done.stderr
    assert "redis://" in done.stderr
