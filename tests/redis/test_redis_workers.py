"""Durable detached runs: worker processes, a SIGKILLed worker, a Redis restart, and a burst.

Workers (and, in the burst, servers) are real ``python -m scoped_a2a`` processes on the test's
backend; where a server runs in the test process it has no worker of its own, so every detached
run is executed by a worker process.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.push import PushSettings
from scoped_a2a.store.redis import open_redis_store

from ..helpers import rpc, served, text_message
from ..push_receiver import Receiver, receiving
from .agents import probe_agent
from .conftest import Proc, RedisServer
from .util import log_of, post_json, wait_for_start, wait_until_ended

pytestmark = [pytest.mark.anyio, pytest.mark.one_python("3.13")]  # suite time: 3.13 only
STARTED = r"worker \S+ started"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def rpc_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def detached(text: str) -> dict[str, Any]:
    return {"message": text_message(text), "configuration": {"returnImmediately": True}}


async def test_a_sigkilled_workers_run_completes_on_another_worker_exactly_once(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    workers = [spawn("worker", "--store", redis_server.url, "--claim-idle", "1", "--lease", "2")
               for _ in range(2)]
    for worker in workers:
        await worker.wait_for(STARTED)
    async with open_redis_store(redis_server.url) as store:
        app = A2AApp(probe_agent, store=store)
        async with served(app) as url, httpx.AsyncClient(timeout=30) as client:
            sent = await rpc(client, url, "SendMessage", detached("first-sleep 60"))
            task_id = sent["result"]["task"]["id"]
            first = await wait_for_start(store, task_id)
            victim = next(w for w in workers if w.pid == first["pid"])
            survivor = next(w for w in workers if w is not victim)
            victim.kill()  # SIGKILL mid-run: no chance to say anything

            (task,) = await wait_until_ended(store, [task_id], timeout=30)
            assert task.status.state.name == "COMPLETED"
            assert task.status.message is not None
            assert task.status.message.text == f"done pid={survivor.pid} attempt=2"
            starts, states = await log_of(store, task_id)
            assert [(s["pid"], s["attempt"]) for s in starts] == [
                (victim.pid, 1), (survivor.pid, 2)]
            assert [s for s in states if s in ("COMPLETED", "FAILED", "CANCELED")] == ["COMPLETED"]
            got = await rpc(client, url, "GetTask", {"id": task_id})
            assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
            # The victim's consumer name goes once its entry has moved to the survivor and its
            # process's lease lapsed (store/redis/consumers.py); the survivor's stays.
            victim_name = (await victim.wait_for(r"worker (\S+) started")).group(1)
            survivor_name = (await survivor.wait_for(r"worker (\S+) started")).group(1)
            await survivor.wait_for(rf"removed the consumer {re.escape(victim_name)} ",
                                    timeout=30)
            infos = await store.conn.client.xinfo_consumers(store.keys.runs, "workers")
            names = {_text(i.get("name", i.get(b"name"))) for i in infos}
            assert names == {survivor_name}, infos
    # The queue holds nothing more: the run was acknowledged once its end was recorded.
    await survivor.wait_for(rf"run end task={task_id} outcome=completed")


async def test_a_redeployed_workers_run_is_left_for_another_worker(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    workers = [spawn("worker", "--store", redis_server.url, "--claim-idle", "1", "--grace", "0.3")
               for _ in range(2)]
    for worker in workers:
        await worker.wait_for(STARTED)
    async with open_redis_store(redis_server.url) as store:
        app = A2AApp(probe_agent, store=store)
        async with served(app) as url, httpx.AsyncClient(timeout=30) as client:
            sent = await rpc(client, url, "SendMessage", detached("first-sleep 60"))
            task_id = sent["result"]["task"]["id"]
            first = await wait_for_start(store, task_id)
            leaving = next(w for w in workers if w.pid == first["pid"])
            staying = next(w for w in workers if w is not leaving)
            leaving.popen.terminate()  # SIGTERM: a redeploy; the run outlives the grace period
            assert leaving.popen.wait(15) == 0
            assert f"run of task {task_id} stopped (shutdown); left for redelivery" in (
                leaving.text())
            (task,) = await wait_until_ended(store, [task_id], timeout=30)
            assert task.status.message is not None
            assert task.status.message.text == f"done pid={staying.pid} attempt=2"
            starts, states = await log_of(store, task_id)
            assert [s["attempt"] for s in starts] == [1, 2]
            assert [s for s in states if s in ("COMPLETED", "FAILED", "CANCELED")] == ["COMPLETED"]


async def test_a_crm_event_run_by_a_worker_process_is_pushed_once_by_the_server(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    worker = spawn("worker", "--store", redis_server.url)
    receiver = Receiver()
    async with open_redis_store(redis_server.url) as store:
        app = A2AApp(probe_agent, store=store,
                     policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action"]),
                     push=PushSettings(allow_hosts=["127.0.0.1"], first_backoff=0.05))
        async with receiving(receiver) as hook, served(app) as url, \
                httpx.AsyncClient(timeout=30) as client:
            await worker.wait_for(STARTED)
            frame = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": text_message("inactivity",
                                        metadata={"evoai_crm_event": "inactivity_action"}),
                "configuration": {"taskPushNotificationConfig": {"url": hook, "id": "crm"}}}}

            async def post() -> None:
                await client.post(url, json=frame, headers={"A2A-Version": "1.0"})

            # The CRM hangs up after 80 ms: here once the worker runs the task (so the request
            # has certainly arrived, however slow the machine), unless it was answered first.
            async with anyio.create_task_group() as tg:
                tg.start_soon(post)
                await worker.wait_for(r"run start task=", timeout=20)
                tg.cancel_scope.cancel()
            with anyio.fail_after(20):
                while not any("COMPLETED" in r.body.decode() for r in receiver.requests):
                    await anyio.sleep(0.05)
            await anyio.sleep(0.3)  # room for a (wrong) second delivery to show up
            completed = [r.json["task"] for r in receiver.requests if "task" in r.json
                         and r.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"]
            assert len(completed) == 1
            task_id = completed[0]["id"]
            assert completed[0]["status"]["message"]["parts"][0]["text"] == (
                f"done pid={worker.pid} attempt=1")
    assert f"run start task={task_id}" in worker.text()


async def test_queued_runs_survive_a_redis_restart_from_its_append_only_file(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    async with open_redis_store(redis_server.url) as store:
        app = A2AApp(probe_agent, store=store)  # no worker anywhere yet: runs stay queued
        async with served(app) as url, httpx.AsyncClient(timeout=30) as client:
            ids = []
            for i in range(20):
                sent = await rpc(client, url, "SendMessage", detached(f"queued {i}"))
                assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
                ids.append(sent["result"]["task"]["id"])
            redis_server.kill()  # SIGKILL: only the append-only file survives
            redis_server.start()
            worker = spawn("worker", "--store", redis_server.url)
            tasks = await wait_until_ended(store, ids, timeout=60)
            assert all(t.status.state.name == "COMPLETED" for t in tasks)
            assert all(t.status.message is not None and
                       t.status.message.text.endswith("attempt=1") for t in tasks)
            listed = await rpc(client, url, "ListTasks", {"pageSize": 100})
            assert listed["result"]["totalSize"] == 20
    assert len(re.findall(r"run end task=\S+ outcome=completed", worker.text())) == 20


@pytest.mark.slow
async def test_two_servers_two_workers_a_thousand_detached_sends_with_hang_ups(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    rule = ["--detach-metadata", "evoai_crm_event"]
    servers = [spawn("serve", "--store", redis_server.url, "--port", "0", "--no-worker", *rule)
               for _ in range(2)]
    workers = [spawn("worker", "--store", redis_server.url, "--concurrency", "64")
               for _ in range(2)]
    urls = [await s.url() for s in servers]
    for worker in workers:
        await worker.wait_for(STARTED)
    total = 1000
    ids: list[str] = []
    limiter = anyio.CapacityLimiter(32)

    async def send(i: int) -> None:
        url = urls[i % 2]
        async with limiter:
            if i % 3 == 0:  # fire and forget: answered at once with the stored task
                sent = await post_json(url, rpc_request("SendMessage", detached(f"burst {i}")),
                                       hang_up_after_first_event=False)
                ids.append(sent["result"]["task"]["id"])
                return
            # A CRM-style event: stream it, take the task, hang up while it runs.
            event = await post_json(url, rpc_request("SendStreamingMessage", {
                "message": text_message(f"burst {i}"),
                "metadata": {"evoai_crm_event": "inactivity_action"}}),
                hang_up_after_first_event=True)
            ids.append(event["result"]["task"]["id"])

    async with anyio.create_task_group() as tg:
        for i in range(total):
            tg.start_soon(send, i)
    assert len(set(ids)) == total

    async with open_redis_store(redis_server.url) as store:
        tasks = await wait_until_ended(store, ids, timeout=90)
        assert all(t.status.state.name == "COMPLETED" for t in tasks)
        for task_id in ids:
            starts, states = await log_of(store, task_id)
            assert [s["attempt"] for s in starts] == [1]  # executed once
            assert states.count("COMPLETED") == 1
    ran = sum(len(re.findall(r"run end task=\S+ outcome=completed", w.text())) for w in workers)
    assert ran == total
    assert all(w.text().count("run start") > 0 for w in workers)  # both shared the work
