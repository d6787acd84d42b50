"""``serve --store sqlite:PATH`` as real processes, killed with SIGKILL and started again.

Each test runs on the test's backend (asyncio and trio): detached runs in flight at a kill are run
again (attempt 2) and every run ends completed exactly once, with the tasks that had ended
reading exactly as before; a stream resumes across the restart with Last-Event-ID, with no event
lost or repeated; an interactive run in flight is recorded canceled saying its caller is gone,
and owner scoping still holds; a push that was due is delivered after the restart; a second
process on the same file and a file that is not a database are refused with one line.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from .helpers import rpc, sse_events, text_message
from .push_receiver import Receiver, eventually, receiving
from .redis.conftest import ROOT, Proc
from .sqlite_serving import AGENT, sqlite_serve  # noqa: F401 (the serve fixture)

pytestmark = pytest.mark.anyio
DETACHED = {"returnImmediately": True}


def _log_of(db: Path) -> dict[str, list[dict[str, Any]]]:
    """Every task's logged events (decoded), straight from the file."""
    out: dict[str, list[dict[str, Any]]] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        for task_id, body in conn.execute(
                "SELECT t.id, e.body FROM events e JOIN tasks t ON t.seq = e.task "
                "ORDER BY t.seq, e.pos"):
            out.setdefault(task_id, []).append(json.loads(body))
    return out


def _terminal(event: dict[str, Any]) -> bool:
    state = event.get("status", {}).get("state", "")
    return state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                     "TASK_STATE_REJECTED")


async def _send_all(url: str, texts: list[str], connections: int = 16) -> list[str]:
    """Detached SendMessage of each text over keep-alive connections; the task ids in order.

    Raw HTTP/1.1 rather than httpx: a thousand sends through httpx cost the test process more
    CPU than the server spends on them.
    """
    host, port = url.split("//")[1].rstrip("/").split(":")
    ids: list[str] = [""] * len(texts)
    todo = iter(range(len(texts)))

    async def connection() -> None:
        async with await anyio.connect_tcp(host, int(port)) as conn:
            buffer = b""
            for i in todo:
                body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {
                    "message": text_message(texts[i]), "configuration": DETACHED}}).encode()
                await conn.send(b"POST / HTTP/1.1\r\nHost: test\r\nA2A-Version: 1.0\r\n"
                                b"Content-Type: application/json\r\nContent-Length: "
                                + str(len(body)).encode() + b"\r\n\r\n" + body)
                while b"\r\n\r\n" not in buffer:
                    buffer += await conn.receive()
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += await conn.receive()
                answer, buffer = json.loads(buffer[:length]), buffer[length:]
                ids[i] = answer["result"]["task"]["id"]

    async with anyio.create_task_group() as tg:
        for _ in range(connections):
            tg.start_soon(connection)
    return ids


async def _count(client: httpx.AsyncClient, url: str, state: str) -> int:
    body = await rpc(client, url, "ListTasks", {"status": state, "pageSize": 1})
    return int(body["result"]["totalSize"])


async def _until_mid_way(client: httpx.AsyncClient, url: str, n: int) -> None:
    """Until a quarter of the runs have ended and at least one is working: its lease is
    committed, so the kill leaves a run in flight to retry (on a loaded machine the last sends
    can be answered before any worker has claimed their runs)."""
    while (await _count(client, url, "TASK_STATE_COMPLETED") < n // 4
           or await _count(client, url, "TASK_STATE_WORKING") == 0):
        await anyio.sleep(0.05)


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_detached_runs_in_flight_at_a_kill_complete_exactly_once(
    serve: Callable[..., Proc], tmp_path: Path,
) -> None:
    n = 1000
    first = serve("--concurrency", "64")
    url = await first.url()
    # The last 64 runs are long, so some are in flight at the kill however slowly the sends
    # went (on a loaded machine the short runs all ended before the last send was answered).
    texts = ["sleep 0.2"] * (n - 64) + ["sleep 4"] * 64
    ids = await _send_all(url, texts)  # each acknowledged: stored with its run
    async with httpx.AsyncClient(timeout=30) as client:
        with anyio.fail_after(60):
            await _until_mid_way(client, url, n)
        first.kill()  # SIGKILL: mid-way, runs in flight and runs still queued
    before = _log_of(tmp_path / "tasks.db")
    ended_before = {t for t, log in before.items() if any(_terminal(e) for e in log)}
    assert 0 < len(ended_before) < n

    second = serve("--concurrency", "64")
    url = await second.url()
    async with httpx.AsyncClient(timeout=30) as client:
        with anyio.fail_after(90):
            while await _count(client, url, "TASK_STATE_COMPLETED") < n:
                await anyio.sleep(0.1)
        assert await _count(client, url, "TASK_STATE_CANCELED") == 0
    second.stop()
    after = _log_of(tmp_path / "tasks.db")
    assert set(after) == set(ids)
    retried = 0
    for task_id in ids:
        log = after[task_id]
        ends = [e for e in log if _terminal(e)]
        assert len(ends) == 1 and ends[0]["status"]["state"] == "TASK_STATE_COMPLETED", log
        attempts = [e["data"]["attempt"] for e in log if e.get("data", {}).get("type") == "start"]
        retried += max(attempts) > 1
        if task_id in ended_before:
            assert log == before[task_id]  # an ended task reads exactly as before the kill
    assert retried > 0  # the runs in flight at the kill were run again, as attempt 2


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_a_stream_resumes_across_a_restart_with_last_event_id(
    serve: Callable[..., Proc],
) -> None:
    agent = ("--agent", "tests.sqlite_agents:progress_agent")
    first = serve(*agent)
    url = await first.url()
    (task_id,) = await _send_all(url, ["progress 30"])
    seen: list[int] = []
    headers = {"A2A-Version": "1.0"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", url, json=call, headers=headers) as r:
            async for event_id, _ in sse_events(r):
                if event_id is not None:
                    seen.append(event_id)
                if len(seen) >= 8:
                    break
        first.kill()
        second = serve(*agent)
        url = await second.url()
        more: list[int] = []
        final: dict[str, Any] = {}
        async with client.stream("POST", url, json=call,
                                 headers={**headers, "Last-Event-ID": str(seen[-1])}) as r:
            async for event_id, frame in sse_events(r):
                if event_id is not None:
                    more.append(event_id)
                final = frame["result"]
    assert seen == list(range(seen[0], seen[0] + len(seen)))
    assert more == list(range(seen[-1] + 1, seen[-1] + 1 + len(more))) and more
    assert final["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_an_interactive_run_in_flight_ends_canceled_and_owners_still_hold(
    serve: Callable[..., Proc], tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-key\nbob:bob-key\n")
    first = serve("--api-keys", str(keys))
    url = await first.url()
    alice, bob = {"X-API-Key": "alice-key"}, {"X-API-Key": "bob-key"}
    async with httpx.AsyncClient(timeout=30) as client:
        done = await rpc(client, url, "SendMessage", {"message": text_message("hi")},
                         headers=alice)
        done_id = done["result"]["task"]["id"]
        call = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": text_message("sleep 30")}}
        running_id = ""
        try:
            async with client.stream("POST", url, json=call,
                                     headers={"A2A-Version": "1.0", **alice}) as r:
                async for _, frame in sse_events(r):
                    running_id = frame["result"].get("task", {}).get("id", running_id)
                    if running_id:
                        first.kill()  # the interactive run is in flight; its caller is here
        except httpx.HTTPError:
            pass
        assert running_id
        second = serve("--api-keys", str(keys))
        url = await second.url()
        got = await rpc(client, url, "GetTask", {"id": running_id}, headers=alice)
        status = got["result"]["status"]
        assert status["state"] == "TASK_STATE_CANCELED"
        assert "caller" in status["message"]["parts"][0]["text"]
        got = await rpc(client, url, "GetTask", {"id": done_id}, headers=alice)
        assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        for task_id in (done_id, running_id):  # another owner's task is "not found"
            refused = await rpc(client, url, "GetTask", {"id": task_id}, headers=bob)
            assert refused["error"]["code"] == -32001
        listed = await rpc(client, url, "ListTasks", {}, headers=bob)
        assert listed["result"]["tasks"] == []


async def test_a_push_that_was_due_is_delivered_after_the_restart(
    serve: Callable[..., Proc],
) -> None:
    receiver = Receiver()
    async with receiving(receiver) as hook, httpx.AsyncClient(timeout=30) as client:
        first = serve("--allow-webhook-host", "127.0.0.1")
        url = await first.url()
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("first-sleep 30"),
            "configuration": {**DETACHED, "taskPushNotificationConfig": {"url": hook}}})
        task_id = sent["result"]["task"]["id"]
        await eventually(lambda: any(r.json.get("statusUpdate", {}).get("status", {}).get(
            "state") == "TASK_STATE_WORKING" for r in receiver.accepted()), 10)
        first.kill()
        second = serve("--allow-webhook-host", "127.0.0.1")
        await second.url()

        def states() -> list[str]:  # a terminal state's payload is the task itself
            return [(r.json.get("statusUpdate") or r.json.get("task", {}))["status"]["state"]
                    for r in receiver.accepted()]

        await eventually(lambda: "TASK_STATE_COMPLETED" in states(), 20)
        assert states().count("TASK_STATE_COMPLETED") == 1
        final = receiver.accepted()[-1].json["task"]
        assert final["id"] == task_id and "attempt=2" in final["status"]["message"]["parts"][0][
            "text"]


async def test_a_second_process_and_a_junk_file_are_refused_in_one_line(
    serve: Callable[..., Proc], tmp_path: Path,
) -> None:
    first = serve()
    await first.url()

    def start(store: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--store", store],
            capture_output=True, text=True, timeout=30, cwd=ROOT,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})

    junk = tmp_path / "notes.txt"
    junk.write_text("not a database\n" * 20)
    async with anyio.create_task_group() as tg:
        results: dict[str, subprocess.CompletedProcess[str]] = {}

        async def run(name: str, store: str) -> None:
            results[name] = await anyio.to_thread.run_sync(start, store)

        tg.start_soon(run, "held", f"sqlite:{tmp_path / 'tasks.db'}")
        tg.start_soon(run, "junk", f"sqlite:{junk}")
    for name, want in (("held", "in use by another process"),
                       ("junk", "not an SQLite database")):
        done = results[name]
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and want in lines[0], done.stderr
    assert junk.read_text().startswith("not a database")
