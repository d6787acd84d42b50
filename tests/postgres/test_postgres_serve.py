"""``serve --store postgresql://...`` as real processes over a real PostgreSQL, both backends.

A send is answered, streamed, and its stream resumed with Last-Event-ID on another process after
the first was killed; owners hold across processes; a resent message is the same task on any
replica and runs once; a stream on replica B follows a run executing on replica A; detached
runs in flight when a server is SIGKILLed each complete exactly once; a SIGKILLed and restarted
postmaster is recovered from without restarting the server (callers get a retryable error
meanwhile); bad credentials and an unreachable server stop start-up with one line, exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from ..helpers import rpc, sse_events, text_message
from ..push_receiver import Receiver, eventually, receiving
from ..redis.conftest import ROOT, Proc
from ..test_store_sqlite_restart import _count, _send_all, _terminal, _until_mid_way
from .server import PASSWORD, PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.one_python("3.13")]  # conftest: 3.13 only
PROGRESS = ("--agent", "tests.sqlite_agents:progress_agent")


def _logs(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every task's logged events (decoded), straight from the database."""
    out: dict[str, list[dict[str, Any]]] = {}
    with psycopg.connect(url) as conn:
        for task_id, body in conn.execute(
                "SELECT t.id, e.body FROM scoped_a2a.events e JOIN scoped_a2a.tasks t "
                "ON t.seq = e.task ORDER BY t.seq, e.pos"):
            out.setdefault(task_id, []).append(json.loads(bytes(body)))
    return out


async def test_a_stream_resumes_on_a_new_process_and_owners_hold(
    serve: Callable[..., Proc], pg_url: str, tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-key\nbob:bob-key\n")
    alice, bob = {"X-API-Key": "alice-key"}, {"X-API-Key": "bob-key"}
    first = serve(pg_url, *PROGRESS, "--api-keys", str(keys), "--claim-idle", "1")
    url = await first.url()
    async with httpx.AsyncClient(timeout=30) as client:
        done = await rpc(client, url, "SendMessage", {"message": text_message("progress 1")},
                         headers=alice)
        assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("progress 40"), "configuration": {"returnImmediately": True}},
            headers=alice)
        task_id = sent["result"]["task"]["id"]
        call = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
        headers = {"A2A-Version": "1.0", **alice}
        seen: list[int] = []
        async with client.stream("POST", url, json=call, headers=headers) as r:
            async for event_id, _ in sse_events(r):
                if event_id is not None:
                    seen.append(event_id)
                if len(seen) >= 8:
                    break
        first.kill()  # SIGKILL, mid-run: its queued run is taken over by the next process
        second = serve(pg_url, *PROGRESS, "--api-keys", str(keys), "--claim-idle", "1")
        url = await second.url()
        more: list[int] = []
        final: dict[str, Any] = {}
        async with client.stream("POST", url, json=call,
                                 headers={**headers, "Last-Event-ID": str(seen[-1])}) as r:
            async for event_id, frame in sse_events(r):
                if event_id is not None:
                    more.append(event_id)
                assert "result" in frame, frame
                final = frame["result"]
        assert seen == list(range(seen[0], seen[0] + len(seen)))
        assert more == list(range(seen[-1] + 1, seen[-1] + 1 + len(more))) and more
        assert final["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert "attempt=2" in json.dumps(final)  # run again after the kill
        for other in (task_id, done["result"]["task"]["id"]):  # bob: "not found"
            refused = await rpc(client, url, "GetTask", {"id": other}, headers=bob)
            assert refused["error"]["code"] == -32001
        listed = await rpc(client, url, "ListTasks", {}, headers=bob)
        assert listed["result"]["tasks"] == []
        listed = await rpc(client, url, "ListTasks", {}, headers=alice)
        assert listed["result"]["totalSize"] == 2


async def test_a_stream_on_one_replica_follows_a_run_on_the_other_and_resends_run_once(
    serve: Callable[..., Proc], pg_url: str,
) -> None:
    a = serve(pg_url, *PROGRESS)
    b = serve(pg_url, *PROGRESS, "--no-worker")  # runs queued on B execute on A
    url_a, url_b = await a.url(), await b.url()
    message = text_message("progress 10")
    params = {"message": message, "configuration": {"returnImmediately": True}}
    async with httpx.AsyncClient(timeout=30) as client:
        sent = await rpc(client, url_b, "SendMessage", params)
        task_id = sent["result"]["task"]["id"]
        resent = await rpc(client, url_a, "SendMessage", params)  # same messageId, on A
        assert resent["result"]["task"]["id"] == task_id
        call = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                "params": {"id": task_id}}
        states: list[str] = []
        async with client.stream("POST", url_b, json=call,
                                 headers={"A2A-Version": "1.0"}) as r:
            async for _, frame in sse_events(r):
                update = frame["result"].get("statusUpdate")
                if update:
                    states.append(update["status"]["state"])
        assert states[-1] == "TASK_STATE_COMPLETED" and len(states) >= 5
        again = await rpc(client, url_b, "SendMessage", params)
        assert again["result"]["task"]["id"] == task_id
    log = _logs(pg_url)[task_id]
    ends = [e for e in log if _terminal(e)]
    assert len(ends) == 1
    assert "attempt 1" in json.dumps(log) and "attempt 2" not in json.dumps(log)
    assert "worker" in a.text() and "worker" not in b.text()  # so it ran on A


async def test_detached_runs_in_flight_at_a_kill_complete_exactly_once(
    serve: Callable[..., Proc], pg_url: str,
) -> None:
    n = 1000
    first = serve(pg_url, "--concurrency", "64", "--claim-idle", "1")
    url = await first.url()
    # The last 64 runs are long, so some are in flight at the kill however slowly the sends
    # went (on a loaded machine the short runs all ended before the last send was answered:
    # nothing was left to retry).
    texts = ["sleep 0.2"] * (n - 64) + ["sleep 4"] * 64
    ids = await _send_all(url, texts)  # each acknowledged: stored with its run
    async with httpx.AsyncClient(timeout=30) as client:
        with anyio.fail_after(120):
            await _until_mid_way(client, url, n)
        first.kill()  # SIGKILL: mid-way, runs in flight and runs still queued
    before = _logs(pg_url)
    ended_before = {t for t, log in before.items() if any(_terminal(e) for e in log)}
    assert 0 < len(ended_before) < n

    second = serve(pg_url, "--concurrency", "64", "--claim-idle", "1")
    url = await second.url()
    async with httpx.AsyncClient(timeout=30) as client:
        with anyio.fail_after(180):
            while await _count(client, url, "TASK_STATE_COMPLETED") < n:
                await anyio.sleep(0.1)
        assert await _count(client, url, "TASK_STATE_CANCELED") == 0
    after = _logs(pg_url)
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
    with anyio.fail_after(30):  # every run is retired (just after its end is recorded)
        while await anyio.to_thread.run_sync(_queued, pg_url):
            await anyio.sleep(0.1)


def _queued(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM scoped_a2a.runs").fetchone()
        return int(row[0]) if row else 0


async def test_a_push_that_was_due_is_delivered_after_a_kill_by_the_next_process(
    serve: Callable[..., Proc], pg_url: str,
) -> None:
    receiver = Receiver()
    hosts = ("--allow-webhook-host", "127.0.0.1", "--claim-idle", "1")
    async with receiving(receiver) as hook, httpx.AsyncClient(timeout=30) as client:
        first = serve(pg_url, *hosts)
        url = await first.url()
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("first-sleep 30"),
            "configuration": {"returnImmediately": True,
                              "taskPushNotificationConfig": {"url": hook}}})
        task_id = sent["result"]["task"]["id"]
        await eventually(lambda: any(r.json.get("statusUpdate", {}).get("status", {}).get(
            "state") == "TASK_STATE_WORKING" for r in receiver.accepted()), 10)
        first.kill()
        second = serve(pg_url, *hosts)
        await second.url()

        def states() -> list[str]:  # a terminal state's payload is the task itself
            return [(r.json.get("statusUpdate") or r.json.get("task", {}))["status"]["state"]
                    for r in receiver.accepted()]

        await eventually(lambda: "TASK_STATE_COMPLETED" in states(), 30)
        assert states().count("TASK_STATE_COMPLETED") == 1
        final = receiver.accepted()[-1].json["task"]
        assert final["id"] == task_id and "attempt=2" in final["status"]["message"]["parts"][0][
            "text"]


async def test_the_server_recovers_by_itself_from_a_killed_and_restarted_postmaster(
    own_postgres: PostgresServer, serve: Callable[..., Proc],
) -> None:
    # own_postgres first: teardown runs backwards, so the serve process stops before the
    # postmaster (whose fast shutdown otherwise waited out its 20 s for the server's pool).
    url_db = own_postgres.url()
    proc = serve(url_db)
    url = await proc.url()
    async with httpx.AsyncClient(timeout=30) as client:
        first = await rpc(client, url, "SendMessage", {"message": text_message("hi")})
        first_id = first["result"]["task"]["id"]
        own_postgres.kill()
        down = await rpc(client, url, "SendMessage", {"message": text_message("hi")})
        assert "error" in down, down
        assert down["error"]["code"] == -32603 or "unavailable" in json.dumps(down).lower()
        await anyio.to_thread.run_sync(own_postgres.restart)
        with anyio.fail_after(60):
            while True:
                again = await rpc(client, url, "SendMessage", {"message": text_message("hi")})
                if "result" in again:
                    break
                await anyio.sleep(0.2)
        assert again["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        got = await rpc(client, url, "GetTask", {"id": first_id})
        assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert proc.popen.poll() is None
    assert PASSWORD not in proc.text()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_bad_credentials_and_an_unreachable_server_are_one_line_and_exit_2(
    pg_url: str,
) -> None:
    bad = pg_url.replace(PASSWORD, "not-the-password")
    port = pg_url.rsplit(":", 1)[1].split("/")[0]
    for store, says in ((bad, "refused the credentials"),
                        (pg_url.replace(f":{port}/", ":1/"), "cannot be reached")):
        done = subprocess.run(
            [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--store", store],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr
        assert "not-the-password" not in done.stderr and PASSWORD not in done.stderr


async def test_runs_queued_by_a_server_without_a_worker_are_run_by_the_worker_command(
    serve: Callable[..., Proc], pg_url: str,
) -> None:
    server = serve(pg_url, "--no-worker")
    worker = serve(pg_url, command="worker")
    url = await server.url()
    await worker.wait_for("worker .* started")
    ids = await _send_all(url, ["echo"] * 20, connections=4)
    async with httpx.AsyncClient(timeout=30) as client:
        with anyio.fail_after(60):
            while await _count(client, url, "TASK_STATE_COMPLETED") < len(ids):
                await anyio.sleep(0.1)
    logs = _logs(pg_url)
    pids = {e["data"]["pid"] for t in ids for e in logs[t] if e.get("data", {}).get("type")
            == "start"}
    assert pids == {worker.pid}  # every run executed in the worker process, once
    assert all(sum(1 for e in logs[t] if _terminal(e)) == 1 for t in ids)


async def test_a_follow_up_handed_over_says_whether_the_rule_detached_it(
    serve: Callable[..., Proc], pg_url: str,
) -> None:
    """Issue 30's marker on PostgreSQL: runs queued on B (no worker) run on A; a follow-up to
    such a task waiting for input, sent to B, is handed over to A. The returnImmediately answer
    says the task works and whether the --detach-metadata rule detached the run it resumes; the
    stored snapshot (folded from the run's first event) says the same."""
    rule = "evoai_crm_event=inactivity_action"
    a = serve(pg_url, "--detach-metadata", rule)
    b = serve(pg_url, "--detach-metadata", rule, "--no-worker")
    url_a, url_b = await a.url(), await b.url()
    async with httpx.AsyncClient(timeout=30) as client:
        for crm in (True, False):
            asked = (await rpc(client, url_b, "SendMessage", {"message": text_message("ask")}))[
                "result"]["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
            meta = {"metadata": {"evoai_crm_event": "inactivity_action"}} if crm else {}
            answer = text_message("Ann", taskId=asked["id"], **meta)
            said = (await rpc(client, url_b, "SendMessage", {
                "message": answer, "configuration": {"returnImmediately": True}}))["result"]["task"]
            want = {"detachedBy": f"rule {rule}"} if crm else None
            assert said["status"]["state"] == "TASK_STATE_WORKING", said
            assert said.get("metadata") == want, said
            with anyio.fail_after(20):
                while (ended := (await rpc(client, url_a, "GetTask", {"id": asked["id"]}))[
                        "result"])["status"]["state"] != "TASK_STATE_COMPLETED":
                    await anyio.sleep(0.05)
            assert ended.get("metadata") == want, ended
    assert "worker" in a.text() and "worker" not in b.text()  # so the runs were on A
