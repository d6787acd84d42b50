"""Exactly once on Redis: a resent messageId is one run across replicas and restarts (issue 22).

Real ``python -m scoped_a2a serve --store redis://...`` processes on the test's backend, one real
redis-server. Runs are counted from the processes' own ``run start`` log lines, one per run.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.store.claims import claim_key

from ..helpers import rpc, text_message
from .conftest import Proc, RedisServer

pytestmark = pytest.mark.anyio
ROUNDS = 200


def runs_started(*procs: Proc) -> list[str]:
    """The task id of every run any of ``procs`` started (one log line per run)."""
    return [m for p in procs for m in re.findall(r"run start task=(\S+)", p.text())]


def params(msg: dict[str, Any], *, detached: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"message": copy.deepcopy(msg)}
    if detached:
        out["configuration"] = {"returnImmediately": True}
    return out


async def wait_ended(client: httpx.AsyncClient, url: str, task_id: str) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            task = (await rpc(client, url, "GetTask", {"id": task_id}))["result"]
            if task["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED",
                                           "TASK_STATE_CANCELED"):
                return dict(task)
            await anyio.sleep(0.02)


async def test_two_replicas_racing_the_same_send_run_it_once(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    """200 rounds of one message sent to two replicas at once (blocking and returnImmediately,
    two replicas and one replica twice): one run each, and both callers get its task."""
    a = spawn("serve", "--store", redis_server.url, "--port", "0")
    b = spawn("serve", "--store", redis_server.url, "--port", "0")
    url_a, url_b = await a.url(), await b.url()
    answers: dict[int, list[dict[str, Any]]] = {}
    async with httpx.AsyncClient(timeout=30) as one, httpx.AsyncClient(timeout=30) as two:

        async def send(client: httpx.AsyncClient, url: str, i: int, msg: dict[str, Any]) -> None:
            body = await rpc(client, url, "SendMessage", params(msg, detached=i % 2 == 1))
            answers.setdefault(i, []).append(body)

        for i in range(ROUNDS):
            msg = text_message(f"round {i}")
            second = url_b if i % 4 < 2 else url_a
            async with anyio.create_task_group() as tg:
                tg.start_soon(send, one, url_a, i, msg)
                tg.start_soon(send, two, second, i, msg)
        task_ids = []
        for i in range(ROUNDS):
            pair = answers[i]
            assert all("result" in body for body in pair), pair
            ids = {body["result"]["task"]["id"] for body in pair}
            assert len(ids) == 1, pair
            task_ids.append(ids.pop())
        for task_id in task_ids:
            assert (await wait_ended(one, url_b, task_id))["status"]["state"] == \
                "TASK_STATE_COMPLETED"
    started = runs_started(a, b)
    assert sorted(started) == sorted(task_ids)  # one run per message, no other


async def test_a_detached_send_resent_after_a_restart_is_the_same_task(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    """The server that accepted a detached send is killed; the sender resends to the
    restarted server and gets the same task (run once), not a second run."""
    first = spawn("serve", "--store", redis_server.url, "--port", "0")
    url = await first.url()
    msg = text_message("restart me")
    async with httpx.AsyncClient(timeout=30) as client:
        task = (await rpc(client, url, "SendMessage", params(msg, detached=True)))["result"][
            "task"]
        await wait_ended(client, url, task["id"])
        first.kill()
        again = spawn("serve", "--store", redis_server.url, "--port", "0")
        url2 = await again.url()
        resent = (await rpc(client, url2, "SendMessage", params(msg, detached=True)))[
            "result"]["task"]
        assert resent["id"] == task["id"]
        assert resent["status"]["state"] == "TASK_STATE_COMPLETED"
        blocking = (await rpc(client, url2, "SendMessage", params(msg)))["result"]["task"]
        assert blocking["id"] == task["id"]
        listed = (await rpc(client, url2, "ListTasks", {}))["result"]
        assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert runs_started(first, again) == [task["id"]]


async def test_another_message_under_the_same_id_is_refused_on_every_replica(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    a = spawn("serve", "--store", redis_server.url, "--port", "0")
    b = spawn("serve", "--store", redis_server.url, "--port", "0")
    url_a, url_b = await a.url(), await b.url()
    msg = text_message("the original")
    async with httpx.AsyncClient(timeout=30) as client:
        task = (await rpc(client, url_a, "SendMessage", params(msg)))["result"]["task"]
        changed = {**msg, "parts": [{"text": "something else"}]}
        refused = await rpc(client, url_b, "SendMessage", params(changed))
        assert refused["error"]["code"] == -32602
        assert "another message" in refused["error"]["message"]
        same = (await rpc(client, url_b, "SendMessage", params(msg)))["result"]["task"]
        assert same["id"] == task["id"]
    assert runs_started(a, b) == [task["id"]]


async def test_claims_expire_with_their_task(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    """A claim lasts while its task runs and gets the task's expiry (or the window) when the
    task ends: nothing is kept forever."""
    import coredis

    a = spawn("serve", "--store", redis_server.url, "--port", "0")
    url = await a.url()
    msg = text_message("expiring")
    async with httpx.AsyncClient(timeout=30) as client:
        task = (await rpc(client, url, "SendMessage", params(msg)))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    redis = coredis.Redis.from_url(redis_server.url)
    async with redis:
        key = f"scoped_a2a:claim:{claim_key('', msg['messageId']).hex()}"
        fields = await redis.hgetall(key)
        assert fields[b"task"] == task["id"].encode() and fields[b"made"] == b"1"
        ttl = await redis.pttl(key)
        assert 6 * 86400 * 1000 < ttl <= 7 * 86400 * 1000  # the default ended-task TTL
