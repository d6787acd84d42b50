"""Hostile probes of ``serve --store sqlite:PATH`` as real processes (both backends).

Each test is one way of breaking a promise of the SQLite store (docs/stores.md) that an earlier
probe found broken: the key file that seals push configs, ...
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import RunContext

from .helpers import rpc, sse_events, text_message
from .redis.conftest import ROOT, Proc
from .sqlite_serving import AGENT, sqlite_serve  # noqa: F401 (the serve fixture)

pytestmark = pytest.mark.anyio
DETACHED = {"returnImmediately": True}


def _start_once(tmp_path: Path, store: str = "") -> subprocess.CompletedProcess[str]:
    """``serve`` expected to refuse to start (it would otherwise run into the timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--agent", AGENT,
         "--store", store or f"sqlite:{tmp_path / 'tasks.db'}"],
        capture_output=True, text=True, timeout=15, cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "PATH": "/usr/bin:/bin"})


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_a_lost_or_exposed_key_file_is_refused_in_one_line(
    serve: Callable[..., Proc], tmp_path: Path,
) -> None:
    """Push configs are sealed with ``<file>.key``. Found: with the key file gone, the next
    start made a new key silently, and every stored push config then failed its seal; and a
    key file readable by other users was used as it was. Both are now one line, exit 2, and
    nothing on disk changes."""
    key = tmp_path / "tasks.db.key"
    async with httpx.AsyncClient(timeout=30) as client:
        first = serve()
        url = await first.url()
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("first-sleep 30"),
            "configuration": {**DETACHED, "taskPushNotificationConfig": {
                "url": "http://127.0.0.1:9/hook", "token": "secret-token"}}})
        assert "result" in sent, sent
        first.kill()
    sealed = key.read_bytes()
    key.unlink()
    done = _start_once(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "key file" in lines[0], done.stderr
    assert not key.exists()
    key.write_bytes(b"\x00" * len(sealed))  # another key of the right size
    key.chmod(0o600)
    done = _start_once(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "key file" in lines[0], done.stderr
    key.write_bytes(sealed)
    key.chmod(0o644)
    done = _start_once(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "chmod 600" in lines[0], done.stderr
    key.chmod(0o600)
    again = serve()
    url = await again.url()
    async with httpx.AsyncClient(timeout=30) as client:
        got = await rpc(client, url, "ListTaskPushNotificationConfigs",
                        {"taskId": sent["result"]["task"]["id"]})
    assert got["result"]["configs"][0]["token"] == "secret-token", got


def _message(text: str, message_id: str) -> dict[str, Any]:
    msg = text_message(text)
    msg["messageId"] = message_id
    return msg


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_resends_across_a_kill_are_the_same_send_or_run_again_once(
    serve: Callable[..., Proc],
) -> None:
    """docs/exactly-once.md across ``kill -9``. Found: an interactive send whose run was in
    flight at the kill (never answered) is recorded canceled with reason ``restart``, and its
    resend (same messageId, as a retrying client sends it) was answered with that canceled task
    for good, although the text the server recorded says "send the message again". It now runs
    again as a new task, as after a hang-up or a shutdown. An acknowledged send's resend is the
    same task and no new run; the same messageId with another body is -32602."""
    async with httpx.AsyncClient(timeout=30) as client:
        first = serve()
        url = await first.url()
        done = await rpc(client, url, "SendMessage", {"message": _message("hi", "m-done")})
        done_id = done["result"]["task"]["id"]
        detached = await rpc(client, url, "SendMessage", {
            "message": _message("first-sleep 30", "m-detached"), "configuration": DETACHED})
        detached_id = detached["result"]["task"]["id"]
        db = first.log.parent / "tasks.db"
        with anyio.fail_after(10):  # its first attempt has started (and logged so)
            while _starts(db).get(detached_id) != 1:
                await anyio.sleep(0.05)
        call = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": _message("sleep 2", "m-cut")}}
        cut_id = ""
        with contextlib.suppress(httpx.HTTPError):
            async with client.stream("POST", url, json=call,
                                     headers={"A2A-Version": "1.0"}) as r:
                async for _, frame in sse_events(r):
                    cut_id = frame["result"].get("task", {}).get("id", cut_id)
                    if cut_id:
                        first.kill()  # the send was never answered: its caller will resend
        assert cut_id
        second = serve()
        url = await second.url()
        again = await rpc(client, url, "SendMessage", {"message": _message("sleep 2", "m-cut")})
        task = again["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", again
        assert task["id"] != cut_id  # a new task: terminal states never change
        third = await rpc(client, url, "SendMessage", {"message": _message("sleep 2", "m-cut")})
        assert third["result"]["task"]["id"] == task["id"]  # the claim moved to the new task
        again = await rpc(client, url, "SendMessage", {"message": _message("hi", "m-done")})
        assert again["result"]["task"]["id"] == done_id
        again = await rpc(client, url, "SendMessage", {
            "message": _message("first-sleep 30", "m-detached"), "configuration": DETACHED})
        assert again["result"]["task"]["id"] == detached_id
        other = await rpc(client, url, "SendMessage", {"message": _message("bye", "m-done")})
        assert other["error"]["code"] == -32602 and "another message" in other["error"][
            "message"], other
        with anyio.fail_after(15):
            while True:
                got = await rpc(client, url, "GetTask", {"id": detached_id})
                if got["result"]["status"]["state"] == "TASK_STATE_COMPLETED":
                    break
                await anyio.sleep(0.1)
    runs = _starts(db)
    assert runs[done_id] == 1 and runs[task["id"]] == 1 and runs.get(cut_id, 0) <= 1
    assert runs[detached_id] == 2  # one cut by the kill, one completed (attempt 2)
    assert set(runs) <= {done_id, task["id"], cut_id, detached_id}


def _starts(db: Path) -> dict[str, int]:
    """How many runs each task's log records (the probe agent logs a ``start`` per run)."""
    out: dict[str, int] = {}
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        for task_id, body in conn.execute(
                "SELECT t.id, e.body FROM events e JOIN tasks t ON t.seq = e.task"):
            if b'"start"' in bytes(body):
                out[task_id] = out.get(task_id, 0) + 1
    return out


async def asking_agent(ctx: RunContext) -> str:
    """``ask``: waits for input (input-required), then says what it got and on which attempt."""
    reply = await ctx.ask("more?")
    return f"got {reply} attempt={ctx.attempt}"


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_a_task_waiting_for_input_at_a_kill(serve: Callable[..., Proc]) -> None:
    """A parked run lives in the process. Found: after a kill, an interactive task that was
    waiting for input (its caller had its input-required answer) was recorded canceled with
    the text for a run whose caller's connection died, telling it to send "the message" again
    while its answer is what it would send; the text now says the run waiting for input is gone
    and to start over. A detached one is run again and asks again; its answer is delivered."""
    agent = ("--agent", "tests.test_store_sqlite_hostile:asking_agent")
    async with httpx.AsyncClient(timeout=30) as client:
        first = serve(*agent)
        url = await first.url()
        parked = (await rpc(client, url, "SendMessage", {"message": text_message("ask")}))[
            "result"]["task"]
        assert parked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        detached = (await rpc(client, url, "SendMessage", {
            "message": text_message("ask"), "configuration": DETACHED}))["result"]["task"]
        await _until_state(client, url, detached["id"], "TASK_STATE_INPUT_REQUIRED")
        first.kill()
        second = serve(*agent)
        url = await second.url()
        got = (await rpc(client, url, "GetTask", {"id": parked["id"]}))["result"]["status"]
        assert got["state"] == "TASK_STATE_CANCELED"
        assert "waiting for input" in got["message"]["parts"][0]["text"], got
        answer = text_message("yes")
        answer["taskId"] = parked["id"]
        refused = await rpc(client, url, "SendMessage", {"message": answer})
        assert refused["error"]["code"] == -32004, refused
        db = first.log.parent / "tasks.db"
        with anyio.fail_after(15):  # the second attempt asked again (a second input-required)
            while _asked(db, detached["id"]) < 2:
                await anyio.sleep(0.05)
        answer = text_message("yes")
        answer["taskId"] = detached["id"]
        done = await rpc(client, url, "SendMessage", {"message": answer})
        status = done["result"]["task"]["status"]
        assert status["state"] == "TASK_STATE_COMPLETED", done
        assert status["message"]["parts"][0]["text"] == "got yes attempt=2"


async def _until_state(client: httpx.AsyncClient, url: str, task_id: str, state: str) -> None:
    with anyio.fail_after(15):
        while (await rpc(client, url, "GetTask", {"id": task_id}))["result"]["status"][
                "state"] != state:
            await anyio.sleep(0.05)


def _asked(db: Path, task_id: str) -> int:
    """How many input-required statuses the task's log holds."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return sum(b"TASK_STATE_INPUT_REQUIRED" in bytes(body) for (body,) in conn.execute(
            "SELECT e.body FROM events e JOIN tasks t ON t.seq = e.task WHERE t.id = ?",
            (task_id,)))


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_a_fifo_for_the_file_or_its_key_is_refused_in_one_line(tmp_path: Path) -> None:
    """Found: a FIFO (or a device) given as the store's file got "disk I/O error" after SQLite
    had tried it (on /dev/null it left a /dev/null-journal behind), and a FIFO as the key file
    hung the start-up forever reading it. Both are now refused before anything is opened."""
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    done = _start_once(tmp_path, f"sqlite:{fifo}")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "not a regular file" in lines[0], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.db"]
    os.mkfifo(tmp_path / "tasks.db.key", 0o600)
    done = _start_once(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "not a regular file" in lines[0], done.stderr


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_a_detached_run_whose_end_a_locked_file_refused_completes_on_its_retry(
    serve: Callable[..., Proc], tmp_path: Path,
) -> None:
    """Another connection holds the file's write lock for longer than the store waits (a slow
    disk, a backup tool). The event loop keeps serving; the detached run's end cannot be
    committed, so the durable queue runs it again. Found, two faults in a row: the worker's
    claim of the retry failed on the locked file too, and the SQLite queue never handed a job
    whose claim failed out again (its reclaim was a no-op), so the task stayed working until a
    restart; and once retried, the run failed at once with "the task store could not write this
    task's latest events", a mark left by the first attempt's lost commit, so a transient lock
    turned a run that completes into a failed task. A failed claim is now reclaimed after the
    claim idle time, and a new attempt starts from what is committed."""
    first = serve("--claim-idle", "2")  # a run left queued is taken again after 2 s
    url = await first.url()
    async with httpx.AsyncClient(timeout=30) as client:
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("sleep 1"), "configuration": DETACHED})
        task_id = sent["result"]["task"]["id"]
        await _until_state(client, url, task_id, "TASK_STATE_WORKING")
        hold = sqlite3.connect(tmp_path / "tasks.db", isolation_level=None)
        try:
            hold.execute("BEGIN IMMEDIATE")
            slowest = 0.0
            with anyio.move_on_after(6.5):  # the run's end waits 5 s for the lock, then fails
                while True:
                    started = anyio.current_time()
                    card = await client.get(url + ".well-known/agent-card.json")
                    assert card.status_code == 200
                    slowest = max(slowest, anyio.current_time() - started)
                    await anyio.sleep(0.2)
            hold.execute("COMMIT")
        finally:
            hold.close()
        assert slowest < 1.0  # the loop never waited on the file
        with anyio.fail_after(20):
            while True:
                got = (await rpc(client, url, "GetTask", {"id": task_id}))["result"]["status"]
                if got["state"] not in ("TASK_STATE_WORKING", "TASK_STATE_SUBMITTED"):
                    break
                await anyio.sleep(0.1)
    assert got["state"] == "TASK_STATE_COMPLETED", got
    assert got["message"]["parts"][0]["text"].endswith("attempt=2")


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_an_interactive_runs_end_a_locked_file_refused_is_recorded_once_it_frees(
    serve: Callable[..., Proc], tmp_path: Path,
) -> None:
    """Another connection holds the file's write lock for 7.5 s while an interactive run ends.
    Its end cannot be committed within the runner's 5 s: the task stayed ``working`` until a
    restart, and the blocking send that started it never got an answer. The end is now retried
    in the background, and the send is answered ``completed`` once the lock is released."""
    proc = serve()
    url = await proc.url()
    answer: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tg:
        async def blocking_send() -> None:
            answer.update(await rpc(client, url, "SendMessage",
                                    {"message": text_message("sleep 2")}))

        tg.start_soon(blocking_send)
        with anyio.fail_after(10):
            while not (await rpc(client, url, "ListTasks", {}))["result"]["tasks"]:
                await anyio.sleep(0.05)
        hold = sqlite3.connect(tmp_path / "tasks.db", isolation_level=None)
        try:
            hold.execute("BEGIN IMMEDIATE")
            await anyio.sleep(7.5)  # the run ends at 2 s; its end waits 5 s, then fails
            assert not answer, answer
            hold.execute("COMMIT")
        finally:
            hold.close()
        with anyio.fail_after(15):
            while not answer:
                await anyio.sleep(0.05)
    status = answer["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_COMPLETED", answer
    assert status["message"]["parts"][0]["text"].endswith("attempt=1")
    await proc.wait_for(r"recorded the end of task \S+ \(completed\) [\d.]+s late")


async def test_a_follow_up_to_a_queued_task_is_refused_saying_so_and_changes_nothing(
    serve: Callable[..., Proc],
) -> None:
    """With one worker slot busy, a second detached task waits in the queue. A follow-up to it
    was refused as "running in another process; send follow-ups to the replica that holds its
    run", untrue of a store that has one process. It now says the run is queued, and the
    queued run still starts from its own first message."""
    proc = serve("--concurrency", "1")
    url = await proc.url()
    async with httpx.AsyncClient(timeout=30) as client:
        await rpc(client, url, "SendMessage", {"message": text_message("sleep 1.5"),
                                               "configuration": DETACHED})
        queued = await rpc(client, url, "SendMessage", {"message": text_message("first"),
                                                        "configuration": DETACHED})
        task_id = queued["result"]["task"]["id"]
        follow = await rpc(client, url, "SendMessage", {
            "message": text_message("second", taskId=task_id), "configuration": DETACHED})
        assert follow["error"]["code"] == -32004, follow
        assert "is queued" in follow["error"]["message"], follow
        assert "another process" not in follow["error"]["message"]
        await _until_state(client, url, task_id, "TASK_STATE_COMPLETED")
        task = (await rpc(client, url, "GetTask", {"id": task_id}))["result"]
    texts = [part["text"] for m in task["history"] for part in m["parts"] if "text" in part]
    assert "first" in texts and "second" not in texts, texts
