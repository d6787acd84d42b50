"""Memory bounds: ended tasks by bytes, runs parked in ``ctx.ask``, the input timeout.

The store tests check the byte budget's rules in process. The server tests run
``python -m scoped_a2a serve`` as an operator would, fill each bound over real HTTP, and read the
server's resident memory from ``/proc/<pid>/status``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import httpx
import msgspec
import pytest

from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.cli.arg_types import parse_size
from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.trajectory import TrajectoryEvent
from scoped_a2a.protocol.types import (
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from scoped_a2a.store.memory import ENDED_EVENT_OVERHEAD, ENDED_TASK_OVERHEAD, MemoryTaskStore

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
TASK_NOT_FOUND = -32001


# --- the store's byte budget, in process --------------------------------------------------------

def task(task_id: str, text: str = "hi") -> Task:
    msg = Message(message_id=f"m-{task_id}", role=Role.USER, parts=[Part(text=text)],
                  task_id=task_id, context_id="c")
    return Task(id=task_id, context_id="c", status=TaskStatus(state=TaskState.SUBMITTED),
                history=[msg])


def status(task_id: str, state: TaskState, text: str | None = None) -> TaskStatusUpdateEvent:
    msg = None
    if text is not None:
        msg = Message(message_id=f"r-{task_id}", role=Role.AGENT, parts=[Part(text=text)])
    return TaskStatusUpdateEvent(task_id=task_id, context_id="c",
                                 status=TaskStatus(state=state, message=msg))


async def test_ended_tasks_are_evicted_oldest_first_by_bytes() -> None:
    # Each ended task is ~100 KiB of JSON: a budget of 350 KiB holds three of them.
    store = MemoryTaskStore(max_ended_bytes=350 << 10)
    for name in "abcdef":
        await store.create(task(name, "x" * (100 << 10)))
    for name in "abcde":
        await store.append(name, status(name, TaskState.COMPLETED))
    for name in "ab":
        with pytest.raises(TaskNotFound):
            await store.get(name)
    for name in "cdef":
        await store.get(name)  # f is still running: never evicted, whatever its size
    assert 300 << 10 < store.ended_bytes <= 350 << 10


async def test_the_budget_counts_encoded_json_plus_the_stated_overheads() -> None:
    store = MemoryTaskStore()
    await store.create(task("t", "x" * 1000))
    await store.append("t", TrajectoryEvent(task_id="t", context_id="c", data={"i": 1}))
    await store.append("t", status("t", TaskState.COMPLETED, "done"))
    snap, _ = await store.get("t")
    page = await store.read("t", 0)
    encoded = len(msgspec_encode(snap)) + sum(len(e.encoded) for e in page.entries)
    assert store.ended_bytes == encoded + ENDED_TASK_OVERHEAD + 2 * ENDED_EVENT_OVERHEAD


def msgspec_encode(obj: Any) -> bytes:
    return msgspec.json.encode(obj)


async def test_the_newest_ended_task_is_kept_even_when_larger_than_the_budget() -> None:
    store = MemoryTaskStore(max_ended_bytes=10 << 10)
    await store.create(task("small"))
    await store.append("small", status("small", TaskState.COMPLETED))
    await store.create(task("big", "x" * (50 << 10)))
    await store.append("big", status("big", TaskState.COMPLETED))
    got, pos = await store.get("big")  # readable once, although it alone exceeds the budget
    assert got.status.state is TaskState.COMPLETED and pos == 1
    with pytest.raises(TaskNotFound):
        await store.get("small")
    await store.create(task("next"))
    await store.append("next", status("next", TaskState.FAILED))
    with pytest.raises(TaskNotFound):
        await store.get("big")


async def test_an_ended_task_reads_as_a_running_one_does() -> None:
    store = MemoryTaskStore(max_events_per_task=3)
    await store.create(task("t"))
    appended: list[Any] = [
        TrajectoryEvent(task_id="t", context_id="c", data={"i": i}) for i in range(4)]
    appended += [status("t", TaskState.WORKING, "half way"),
                 status("t", TaskState.COMPLETED, "done")]
    for event in appended[:-1]:
        await store.append("t", event)
    live_snap, _ = await store.get("t")
    before_end = msgspec_encode(live_snap)
    await store.append("t", appended[-1])  # the task ends: it is kept as JSON from now on

    page = await store.read("t", 0)  # positions 1-3 were dropped by the per-task cap
    assert [e.position for e in page.entries] == [4, 5, 6] and page.first_retained == 4
    assert [e.event for e in page.entries] == appended[3:]
    assert [e.encoded for e in page.entries] == [msgspec_encode(e) for e in appended[3:]]
    assert not page.has_more and page.next == 6
    page = await store.read("t", 3, max_events=2)
    assert [e.position for e in page.entries] == [4, 5] and page.has_more and page.next == 5
    page = await store.read("t", 4, max_bytes=1)  # the first entry comes whatever its size
    assert [e.position for e in page.entries] == [5] and page.has_more
    page = await store.read("t", 6)
    assert page.entries == [] and not page.has_more and page.next == 6
    snap, pos = await store.get("t")
    assert pos == 6 and snap.status.state is TaskState.COMPLETED
    assert msgspec_encode(page.task) == msgspec_encode(snap)
    assert [m.parts[0].text for m in snap.history or []] == ["hi", "half way", "done"]
    assert snap.history is not None
    assert msgspec_encode(snap.history[:2]) == msgspec_encode(
        msgspec.json.decode(before_end, type=Task).history)
    # Each read decodes a fresh copy: a reader mutating it cannot change the stored task.
    snap.status.state = TaskState.FAILED
    assert (await store.get("t"))[0].status.state is TaskState.COMPLETED


async def test_a_waiting_reader_still_finds_its_task_although_the_budget_evicts_it() -> None:
    store = MemoryTaskStore(max_ended_bytes=1)  # every ended task but the newest is evicted
    await store.create(task("mine"))
    seen: list[TaskState] = []

    async def blocking_sender() -> None:
        await store.wait("mine", 0)  # as a blocking send waits for its task's end
        page = await store.read("mine", 0)
        seen.append(page.task.status.state)

    async with anyio.create_task_group() as tg:
        tg.start_soon(blocking_sender)
        await anyio.wait_all_tasks_blocked()
        await store.append("mine", status("mine", TaskState.COMPLETED))
        # Another task ends before the waiter has run: it must not evict "mine" yet.
        await store.create(task("other"))
        await store.append("other", status("other", TaskState.COMPLETED))
    assert seen == [TaskState.COMPLETED]
    await store.create(task("third"))
    await store.append("third", status("third", TaskState.COMPLETED))
    with pytest.raises(TaskNotFound):
        await store.get("mine")  # unpinned once its reader had it


# --- a real server --------------------------------------------------------------------------

class Server:
    """``python -m scoped_a2a serve`` in a subprocess, its stderr collected by a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        assert proc.stderr is not None
        self._reader = threading.Thread(target=self._read, args=(proc.stderr,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)

    def log(self) -> str:
        return "".join(self.lines)

    async def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        with anyio.fail_after(timeout):
            while not (match := re.search(pattern, self.log())):
                assert self.proc.poll() is None, f"the server exited:\n{self.log()}"
                await anyio.sleep(0.02)
        return match

    def rss(self) -> int:
        """The server's resident set size in bytes (VmRSS)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        assert match, status
        return int(match.group(1)) * 1024


@asynccontextmanager
async def server(backend: str, *args: str) -> AsyncIterator[tuple[Server, str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "serve", "--host", "127.0.0.1", "--port", "0",
         "--backend", backend, *args],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    srv = Server(proc)
    try:
        url = (await srv.wait_for(r"serving on (http://\S+)")).group(1)
        yield srv, url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            with anyio.fail_after(20):
                while proc.poll() is None:
                    await anyio.sleep(0.05)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def backend(anyio_backend: str) -> str:
    """The server runs on the same backend as the test."""
    return anyio_backend


BUDGET = 64 * MiB
MESSAGE = 1 * MiB
# What the interpreter may grow by besides the tasks kept: the allocator keeps the buffers of
# the largest request it handled (the 1 MiB body, its decoded message, the 4 MiB answer the
# demo agent's echo makes, their encodings) for reuse instead of returning them to the system,
# and msgspec, httpcore and hypercorn keep their own. Measured: 10-20 MiB.
ALLOWANCE = 32 * MiB


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_ended_tasks_stay_within_the_byte_budget_in_a_real_server(backend: str) -> None:
    async with (
        server(backend, "--max-ended-bytes", "64MiB") as (srv, url),
        httpx.AsyncClient(timeout=60) as client,
    ):
        text = "x" * MESSAGE  # one word: the demo agent echoes it in three chunks

        async def send() -> str:
            body = await rpc(client, url, "SendMessage", {"message": text_message(text)})
            assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
            return str(body["result"]["task"]["id"])

        for _ in range(3):  # warm up: every code path and buffer the sends use
            await send()
        before = srv.rss()
        # Each task keeps ~6 MiB of JSON (the message, the echoed reply as artifact, history
        # and status, and their events): 36 sends are over three times the budget.
        ids = [await send() for _ in range(36)]
        after = srv.rss()
        growth = after - before
        print(f"\n[{backend}] RSS before {before / MiB:.1f} MiB, after {after / MiB:.1f} MiB, "
              f"growth {growth / MiB:.1f} MiB for {len(ids)} tasks of ~6 MiB, budget 64 MiB")
        assert growth <= BUDGET * 1.2 + ALLOWANCE, (before, after)
        oldest = await rpc(client, url, "GetTask", {"id": ids[0], "historyLength": 0})
        assert oldest["error"]["code"] == TASK_NOT_FOUND, oldest
        for task_id in ids[-5:]:
            got = await rpc(client, url, "GetTask", {"id": task_id, "historyLength": 0})
            assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED", got


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_parked_runs_are_capped_and_unanswered_questions_time_out(backend: str) -> None:
    async with (
        server(backend, "--max-parked-runs", "2", "--input-timeout", "5") as (srv, url),
        httpx.AsyncClient(timeout=30) as client,
    ):
        async def ask() -> dict[str, Any]:
            body = await rpc(client, url, "SendMessage", {"message": text_message("ask")})
            result: dict[str, Any] = body["result"]["task"]
            return result

        first, second = await ask(), await ask()
        for parked in (first, second):
            assert parked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", parked
        # The cap is reached: the next run that asks fails at once, saying why.
        refused = await ask()
        assert refused["status"]["state"] == "TASK_STATE_FAILED", refused
        message = refused["status"]["message"]
        assert message["metadata"]["reason"] == "parked-limit"
        assert "--max-parked-runs" in message["parts"][0]["text"]
        # Sends that do not ask are not affected.
        plain = await rpc(client, url, "SendMessage", {"message": text_message("hello")})
        assert plain["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # Answering a parked run frees its slot: the next question parks again.
        done = await rpc(client, url, "SendMessage", {
            "message": text_message("kiwi", taskId=first["id"])})
        assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", done
        third = await ask()
        assert third["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", third
        # Nobody answers the other two: after the input timeout they fail, one log line each.
        for task in (second, third):
            await srv.wait_for(rf"run end task={task['id']} outcome=failed .*"
                               r"reason=input-timeout")
            got = (await rpc(client, url, "GetTask", {"id": task["id"]}))["result"]
            assert got["status"]["state"] == "TASK_STATE_FAILED"
            assert got["status"]["message"]["metadata"]["reason"] == "input-timeout"
            assert "--input-timeout" in got["status"]["message"]["parts"][0]["text"]
        log = srv.log()
    assert "Traceback" not in log, log
    for task in (second, third, refused):
        lines = [line for line in log.splitlines() if task["id"] in line]
        assert len(lines) == 2, lines  # "run start" and "run end", nothing else


async def test_cancelling_a_parked_run_frees_its_slot() -> None:
    app = A2AApp(demo_agent, policy=RunPolicy(max_parked_runs=1))
    async with served(app) as url, httpx.AsyncClient() as client:
        first = await rpc(client, url, "SendMessage", {"message": text_message("ask")})
        task_id = first["result"]["task"]["id"]
        assert app.runner.parked == 1
        refused = await rpc(client, url, "SendMessage", {"message": text_message("ask")})
        assert refused["result"]["task"]["status"]["state"] == "TASK_STATE_FAILED"
        canceled = await rpc(client, url, "CancelTask", {"id": task_id})
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert app.runner.parked == 0
        again = await rpc(client, url, "SendMessage", {"message": text_message("ask")})
        assert again["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert app.runner.parked == 1


def test_the_policy_refuses_bounds_that_make_no_sense() -> None:
    with pytest.raises(ValueError, match="max_parked_runs"):
        RunPolicy(max_parked_runs=-1)
    with pytest.raises(ValueError, match="input_timeout"):
        RunPolicy(input_timeout=0)
    with pytest.raises(ValueError, match="positive"):
        MemoryTaskStore(max_ended_bytes=0)


@pytest.mark.parametrize(("text", "size"), [
    ("1048576", 1 << 20), ("64MiB", 64 << 20), ("1GiB", 1 << 30), ("1.5 GiB", 3 << 29),
    ("500MB", 500_000_000), ("512k", 512 << 10), ("2m", 2 << 20)])
def test_sizes_parse_like_an_operator_writes_them(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MiB", "-1", "12 parsecs", "0"])
def test_a_bad_size_says_how_to_write_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="size"):
        parse_size(text)
