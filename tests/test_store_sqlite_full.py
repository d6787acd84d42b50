"""A full disk under a real ``serve --store sqlite:PATH`` process (both backends), on a 2 MiB
tmpfs the test mounts (root only; skipped where mounting is impossible).

Found: on a 2 MiB file system, blocking sends whose task was already committed got no answer
until space was freed (16 s), then ``failed``; the log held several tracebacks; a restart while
full said ``disk I/O error``. Now: every such send is answered at once with a retryable error
(-32000, naming the full disk), the end it could not store is stored once there is room again
(nothing committed is lost), the log has one line per failure and no traceback, and a start-up
on the full disk says the disk is full, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from .helpers import rpc, sse_events
from .redis.conftest import ROOT, Proc

pytestmark = pytest.mark.anyio
AGENT = "tests.sqlite_agents:bulky_agent"
SENDS = 12


@contextlib.contextmanager
def small_disk(where: Path, size: str = "2m") -> Iterator[Path]:
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(where)], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=10)


def fill(where: Path) -> Path:
    """Write a file until the file system is full; the file."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def assert_whole(task: dict[str, Any]) -> None:
    """An end stored after the disk had room again: ``failed``, or ``completed`` with every
    artifact the bulky agent made (a ``completed`` end whose artifacts were lost in a failed
    commit claimed an answer the task does not hold)."""
    state = task["status"]["state"]
    if state == "TASK_STATE_COMPLETED":
        assert len(task.get("artifacts") or ()) == 8, (task["id"], len(task.get("artifacts") or
                                                                       ()))
    else:
        assert state == "TASK_STATE_FAILED", task["status"]


def _message(text: str, message_id: str) -> dict[str, object]:
    return {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}


def _assert_few_lines(text: str, task_ids: set[str]) -> None:
    """The full disk is one failure: its lines at WARNING or above name it, at most one per
    task, and they are rate-limited by class (store/outage_log.py: one line, then at most one
    every 5 s with a count), so a burst of failed tasks is a few lines, not one each."""
    loud = [line for line in text.splitlines() if " ERROR " in line or " WARNING " in line]
    assert any("full" in line for line in loud), loud[-20:]
    for task_id in task_ids:
        lines = [line for line in loud if task_id in line]
        assert len(lines) <= 1, lines
    ends = [line for line in loud if "could not record the end" in line]
    assert 1 <= len(ends) <= 4, ends[:10]


def _serve(db: Path, backend: str, log: Path) -> Proc:
    return Proc(["serve", "--backend", backend, "--port", "0", "--agent", AGENT,
                 "--store", f"sqlite:{db}", "--log-level", "INFO", "--grace", "1"], log)


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_a_full_disk_answers_committed_sends_at_once_and_loses_nothing(
        tmp_path: Path, anyio_backend: str) -> None:
    with small_disk(tmp_path / "small") as disk:
        db = disk / "tasks.db"
        proc = _serve(db, anyio_backend, tmp_path / "serve.log")
        try:
            url = await proc.url()
            async with httpx.AsyncClient(timeout=60) as client:
                kept = [await rpc(client, url, "SendMessage",
                                  {"message": _message("hi", f"k{i}")}) for i in range(5)]
                kept_ids = [k["result"]["task"]["id"] for k in kept]
                answers: dict[int, tuple[float, dict[str, object]]] = {}

                async def send(i: int) -> None:
                    reply = await rpc(client, url, "SendMessage",
                                      {"message": _message("bulky 1.0 8", f"b{i}")})
                    answers[i] = (time.monotonic(), reply)

                async with anyio.create_task_group() as tg:
                    for i in range(SENDS):
                        tg.start_soon(send, i)
                    # Every task committed and its run asleep: then the disk fills up.
                    with anyio.fail_after(10):
                        while proc.text().count("run start") < 5 + SENDS:
                            await anyio.sleep(0.02)
                    filler = await anyio.to_thread.run_sync(fill, disk)
                    filled = time.monotonic()
                failed = {}
                for i, (at, reply) in answers.items():
                    if "error" in reply:
                        # Within a moment of the runs' ends (about 1 s after the fill), not
                        # once space is freed.
                        assert at - filled < 4.0, (i, at - filled)
                        error = reply["error"]
                        assert isinstance(error, dict) and error["code"] == -32000, reply
                        assert "disk is full" in error["message"], error
                        assert "GetTask" in error["message"], error
                        failed[i] = error
                    else:
                        task = reply["result"]["task"]  # type: ignore[index]
                        assert task["status"]["state"] == "TASK_STATE_FAILED", reply
                assert failed, "no send met the full disk"
                text = proc.text()
                assert "Traceback" not in text, text[-4000:]
                ids = set(re.findall(r"task (\w{32})", " ".join(
                    e["message"] for e in failed.values())))
                _assert_few_lines(text, ids)
                # Acknowledged tasks still read while the disk is full.
                for task_id in kept_ids:
                    got = await rpc(client, url, "GetTask", {"id": task_id})
                    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED", got
                # Room again: every end is stored (the background retry), nothing is lost.
                filler.unlink()
                with anyio.fail_after(20):
                    for task_id in ids:
                        while True:
                            got = await rpc(client, url, "GetTask", {"id": task_id})
                            state = got["result"]["status"]["state"]
                            if state != "TASK_STATE_WORKING":
                                break
                            await anyio.sleep(0.1)
                        assert_whole(got["result"])
        finally:
            proc.stop()
        assert proc.popen.returncode == 0, proc.text()[-3000:]
        # A start-up on the full disk names the full disk, in one line, exit 2.
        fill(disk)
        done = subprocess.run(
            [sys.executable, "-m", "scoped_a2a", "serve", "--backend", anyio_backend,
             "--port", "0", "--agent", AGENT, "--store", f"sqlite:{db}"],
            capture_output=True, text=True, timeout=30, cwd=ROOT,
            env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "PATH": "/usr/bin:/bin"})
        assert done.returncode == 2, done.stderr[-3000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert f"the disk holding {disk} is full" in lines[0], lines[0]
        assert "free space" in lines[0], lines[0]


STREAMS = 4  # of each kind: JSON-RPC streams, HTTP+JSON streams, JSON-RPC subscribers


async def test_a_full_disk_ends_streams_at_once_with_a_clear_error(
        tmp_path: Path, anyio_backend: str) -> None:
    """Streams (JSON-RPC and HTTP+JSON SendStreamingMessage, SubscribeToTask) of runs whose
    events and end the full disk refuses end within moments with a retryable error naming the
    full disk (they waited with no word until space was freed); a subscriber that comes later
    is answered at once; nothing committed is lost; once there is room every end is stored,
    and none says ``completed`` with its artifacts missing (it did: the pushed artifact events
    were lost in the failed commit, and the retried end still said ``completed``)."""
    with small_disk(tmp_path / "small") as disk:
        proc = _serve(disk / "tasks.db", anyio_backend, tmp_path / "serve.log")
        try:
            url = await proc.url()
            async with httpx.AsyncClient(timeout=60) as client:
                kept = await rpc(client, url, "SendMessage", {"message": _message("hi", "k")})
                kept_id = kept["result"]["task"]["id"]
                ends: dict[str, tuple[float, dict[str, Any]]] = {}  # name -> (when, last)
                task_ids: dict[str, str] = {}
                heard: set[str] = set()  # the streams that have had their first event
                started = anyio.Event()

                async def stream(name: str, method: str, target: str, body: dict[str, Any],
                                 headers: dict[str, str]) -> None:
                    last: dict[str, Any] = {}
                    async with client.stream(method, target, json=body,
                                             headers=headers) as response:
                        assert response.status_code == 200, await response.aread()
                        async for _, data in sse_events(response):
                            last = data
                            heard.add(name)
                            inner = data.get("result", data)
                            if name not in task_ids and "task" in inner:
                                task_ids[name] = inner["task"]["id"]
                                if len(task_ids) == 2 * STREAMS:
                                    started.set()
                    ends[name] = (time.monotonic(), last)

                def rpc_body(method: str, params: dict[str, Any]) -> dict[str, Any]:
                    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

                v1 = {"A2A-Version": "1.0"}
                async with anyio.create_task_group() as tg:
                    for i in range(STREAMS):
                        tg.start_soon(stream, f"rpc{i}", "POST", url, rpc_body(
                            "SendStreamingMessage",
                            {"message": _message("bulky 1.0 8", f"r{i}")}), v1)
                        tg.start_soon(stream, f"rest{i}", "POST", url + "message:stream",
                                      {"message": _message("bulky 1.0 8", f"h{i}")}, v1)
                    with anyio.fail_after(10):
                        await started.wait()
                    for i in range(STREAMS):
                        tg.start_soon(stream, f"sub{i}", "POST", url, rpc_body(
                            "SubscribeToTask", {"id": task_ids[f"rpc{i}"]}), v1)
                    # Every run asleep and each subscriber in: then the disk fills up.
                    with anyio.fail_after(10):
                        while proc.text().count("run start") < 1 + 2 * STREAMS:
                            await anyio.sleep(0.02)
                        while len(heard) < 3 * STREAMS:
                            await anyio.sleep(0.02)
                    filler = await anyio.to_thread.run_sync(fill, disk)
                    filled = time.monotonic()
                    with anyio.move_on_after(15):
                        while len(ends) < 3 * STREAMS:
                            await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()  # a stream still open now hangs: it fails below
                open_ = sorted((set(task_ids) | {f"sub{i}" for i in range(STREAMS)}) - set(ends))
                assert not open_, (f"streams still open 15 s after the disk filled: {open_}",
                                   proc.text()[-2000:])
                for name, (at, last) in sorted(ends.items()):
                    # Within moments of the runs' ends (about 1 s after the fill), not once
                    # space is freed; the last event is the error, naming the full disk.
                    assert at - filled < 4.0, (name, at - filled, last)
                    error = last.get("error")
                    assert isinstance(error, dict), (name, last)
                    if name.startswith("rest"):
                        assert (error["code"], error["status"]) == (503, "UNAVAILABLE"), error
                    else:
                        assert error["code"] == -32000, error
                    assert "disk is full" in error["message"], error
                    assert "GetTask" in error["message"], error
                # A subscriber that comes now is answered at once, in a plain JSON-RPC error.
                late = await rpc(client, url, "SubscribeToTask", {"id": task_ids["rest0"]})
                assert late.get("error", {}).get("code") == -32000, late
                assert "disk is full" in late["error"]["message"], late
                text = proc.text()
                assert "Traceback" not in text, text[-4000:]
                _assert_few_lines(text, set(task_ids.values()))
                got = await rpc(client, url, "GetTask", {"id": kept_id})
                assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED", got
                # Room again: every end is stored, and none claims what it does not hold.
                filler.unlink()
                with anyio.fail_after(20):
                    for task_id in task_ids.values():
                        while True:
                            got = await rpc(client, url, "GetTask", {"id": task_id})
                            if got["result"]["status"]["state"] != "TASK_STATE_WORKING":
                                break
                            await anyio.sleep(0.1)
                        assert_whole(got["result"])
        finally:
            proc.stop()
        assert proc.popen.returncode == 0, proc.text()[-3000:]
