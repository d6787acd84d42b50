"""Exactly once on Redis: a resent messageId is one run across replicas and restarts (issue 22).

Real ``python -m scoped_a2a serve --store redis://...`` processes on the test's backend, one real
redis-server. Runs are counted from the processes' own ``run start`` log lines, one per run.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.client import A2AClient
from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.types import Task
from scoped_a2a.store.claims import PriorSend, claim_key

from ..helpers import cutting_sends, rpc, text_message
from .conftest import Proc, RedisServer

pytestmark = pytest.mark.anyio
ROUNDS = 200
AGENT = "tests.redis.resend_agents:agent"


def runs_started(*procs: Proc) -> list[str]:
    """The task id of every run any of ``procs`` started (one log line per run)."""
    return [m for p in procs for m in re.findall(r"run start task=(\S+)", p.text())]


def agent_runs(*procs: Proc) -> list[str]:
    """The task id of every run of the test agent (resend_agents.py) in ``procs``' logs."""
    return [m for p in procs for m in re.findall(r"agent run task=(\S+)", p.text())]


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


@pytest.mark.one_python  # suite time: one Python is enough (3.11, which has more room)
async def test_two_replicas_racing_the_same_send_run_it_once(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    """200 rounds of one message sent twice at once (blocking and returnImmediately): to two
    replicas, twice to one replica on two connections, and as two streams of one HTTP/2
    connection. One run each, and both callers get its task. Then: another message under one
    of those ids is refused on either replica, and the claims expire with their tasks."""
    import coredis

    a = spawn("serve", "--store", redis_server.url, "--port", "0", "--http2")
    b = spawn("serve", "--store", redis_server.url, "--port", "0")
    url_a, url_b = await a.url(), await b.url()
    answers: dict[int, list[dict[str, Any]]] = {}
    async with httpx.AsyncClient(timeout=30) as one, httpx.AsyncClient(timeout=30) as two, \
            httpx.AsyncClient(timeout=30, http1=False, http2=True) as h2:

        async def send(client: httpx.AsyncClient, url: str, i: int, msg: dict[str, Any]) -> None:
            body = await rpc(client, url, "SendMessage", params(msg, detached=i % 2 == 1))
            answers.setdefault(i, []).append(body)

        msgs = [text_message(f"round {i}") for i in range(ROUNDS)]

        async def round_(i: int) -> None:
            msg = msgs[i]
            way = i % 6
            first, second = ((one, url_a), (two, url_b)) if way < 2 else (
                ((one, url_a), (two, url_a)) if way < 4 else ((h2, url_a), (h2, url_a)))
            async with anyio.create_task_group() as tg:
                tg.start_soon(send, *first, i, msg)
                tg.start_soon(send, *second, i, msg)

        for batch in range(0, ROUNDS, 10):  # ten rounds at a time: seconds, not minutes
            async with anyio.create_task_group() as tg:
                for i in range(batch, batch + 10):
                    tg.start_soon(round_, i)
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
        for url in (url_a, url_b):
            changed = {**msgs[0], "parts": [{"text": "something else"}]}
            refused = await rpc(one, url, "SendMessage", params(changed))
            assert refused["error"]["code"] == -32602
            assert "another message" in refused["error"]["message"]
    started = runs_started(a, b)
    assert sorted(started) == sorted(task_ids)  # one run per message, no other
    redis = coredis.Redis.from_url(redis_server.url)
    async with redis:
        for i in (0, 1):  # a blocking send's claim, a detached one's
            key = f"scoped_a2a:claim:{claim_key('', msgs[i]['messageId']).hex()}"
            fields = await redis.hgetall(key)
            assert fields[b"task"] == task_ids[i].encode() and fields[b"made"] == b"1"
            ttl = await redis.pttl(key)
            assert 6 * 86400 * 1000 < ttl <= 7 * 86400 * 1000  # the default ended-task TTL


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


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_a_resend_after_a_hang_up_runs_again_and_a_resent_follow_up_does_not(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    """1. The caller of an interactive send on A hangs up (its run is cancelled, reason
    hang-up); its resend, to B, runs the message again as a new task; a third send answers
    with that one. 2. The answer to input-required, sent twice at once to the replica holding
    the run and again to the other replica after the end, is delivered once, every copy
    answered with the completed task; its claim then expires with the task."""
    import coredis

    a = spawn("serve", "--store", redis_server.url, "--port", "0", "--agent", AGENT)
    b = spawn("serve", "--store", redis_server.url, "--port", "0", "--agent", AGENT)
    url_a, url_b = await a.url(), await b.url()
    msg = text_message("sleep 1")
    async with httpx.AsyncClient(timeout=30) as one, httpx.AsyncClient(timeout=30) as two:
        async with httpx.AsyncClient(timeout=30) as doomed, anyio.create_task_group() as tg:
            tg.start_soon(rpc, doomed, url_a, "SendMessage", params(msg))
            first = (await a.wait_for(r"agent run task=(\S+) text=sleep 1")).group(1)
            tg.cancel_scope.cancel()  # the caller hangs up
        hung = await wait_ended(one, url_a, first)
        assert hung["status"]["state"] == "TASK_STATE_CANCELED"
        assert hung["status"]["message"]["metadata"]["reason"] == "hang-up"
        again = (await rpc(one, url_b, "SendMessage", params(msg)))["result"]["task"]
        assert again["id"] != first
        assert again["status"]["state"] == "TASK_STATE_COMPLETED"
        third = (await rpc(one, url_a, "SendMessage", params(msg)))["result"]["task"]
        assert third["id"] == again["id"]

        asked = (await rpc(one, url_a, "SendMessage", params(text_message("ask"))))["result"][
            "task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        answer = text_message("Ann", taskId=asked["id"])
        bodies: list[dict[str, Any]] = []

        async def answer_on(client: httpx.AsyncClient, url: str) -> None:
            bodies.append(await rpc(client, url, "SendMessage", params(answer)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_on, one, url_a)
            tg.start_soon(answer_on, two, url_a)
        await answer_on(one, url_b)
        for body in bodies:
            assert body["result"]["task"]["id"] == asked["id"], body
            assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
    assert sorted(agent_runs(a, b)) == sorted([first, again["id"], asked["id"]])
    assert len(re.findall(r"agent answer task=\S+ text=Ann", a.text() + b.text())) == 1
    redis = coredis.Redis.from_url(redis_server.url)
    async with redis:
        key = f"scoped_a2a:claim:{claim_key('', answer['messageId']).hex()}"
        assert (await redis.hget(key, "task")) == asked["id"].encode()
        assert await redis.pttl(key) > 0


async def test_another_callers_same_message_id_is_its_own_send(
    redis_server: RedisServer, spawn: Callable[..., Proc], tmp_path: Path,
) -> None:
    """With --api-keys, bob's send of alice's messageId (on another replica) is a run of its
    own; each one's resend answers with its own task."""
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-secret\nbob:bob-secret\n")
    a = spawn("serve", "--store", redis_server.url, "--port", "0", "--agent", AGENT,
              "--api-keys", str(keys))
    b = spawn("serve", "--store", redis_server.url, "--port", "0", "--agent", AGENT,
              "--api-keys", str(keys))
    url_a, url_b = await a.url(), await b.url()
    msg = text_message("mine")
    ids: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=30) as client:
        for who, url in (("alice", url_a), ("bob", url_b), ("alice", url_b), ("bob", url_a)):
            headers = {"X-API-Key": f"{who}-secret"}
            task = (await rpc(client, url, "SendMessage", params(msg), headers=headers))[
                "result"]["task"]
            assert ids.setdefault(who, task["id"]) == task["id"]
    assert ids["alice"] != ids["bob"]
    assert sorted(agent_runs(a, b)) == sorted(ids.values())


async def test_the_client_resends_through_a_dropped_answer(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    """A fault proxy cuts the answer of a detached send the server accepted (queued durably):
    the client resends, gets the same task, and the message runs once."""
    a = spawn("serve", "--store", redis_server.url, "--port", "0", "--agent", AGENT)
    url = await a.url()
    async with cutting_sends(url, n=2) as proxy_url, \
            A2AClient(proxy_url, rpc_url=proxy_url) as client:
        await client.card()
        task = await client.send("through the proxy", return_immediately=True)
        assert client.resends == 2
        assert isinstance(task, Task)
        ended = await wait_ended(client.http, url, task.id)
    assert ended["status"]["state"] == "TASK_STATE_COMPLETED"
    assert agent_runs(a) == [task.id]


async def test_a_pending_claim_is_seen_elsewhere_until_create_makes_it(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes' stores: a claim taken in one is seen pending in the other until the task's
    CREATE makes it; a pending claim whose sender never stored its task lapses, and that
    sender's late CREATE is refused (no second run), while the new claimant's succeeds."""
    from scoped_a2a.protocol.errors import ServerUnavailable
    from scoped_a2a.store.redis import claims as redis_claims
    from scoped_a2a.store.redis import open_redis_store

    from .test_redis_store import new_task

    fp = b"f" * 16
    async with open_redis_store(redis_server.url) as a, open_redis_store(redis_server.url) as b:
        task = new_task()
        assert await a.claim_message("o", "m1", fp, task.id) is None
        assert await b.claim_message("o", "m1", fp, "other") == PriorSend(task.id, fp, 0, False)
        await a.create(task, owner="o")
        assert await b.claim_message("o", "m1", fp, "other") == PriorSend(task.id, fp, 0, True)

        # Long enough that the taker's own claim outlives its next two calls on a loaded
        # machine (at 0.05 s it lapsed too, at load 12, and the taker's CREATE was refused).
        monkeypatch.setattr(redis_claims, "CLAIM_PENDING", 0.5)
        late, taker = new_task(), new_task()
        assert await a.claim_message("o", "m2", fp, late.id) is None
        await anyio.sleep(0.7)  # the claim lapses: its sender stalled past the pending time
        assert await b.claim_message("o", "m2", fp, taker.id) is None
        with pytest.raises(ServerUnavailable):
            await a.create(late, owner="o")
        await b.create(taker, owner="o")
        with pytest.raises(TaskNotFound):
            await a.get(late.id)
        assert (await a.claim_message("o", "m2", fp, "x")) == PriorSend(taker.id, fp, 0, True)

        # A follow-up's claim is pending until confirmed as the message is delivered.
        assert await a.claim_message("o", "m3", fp, task.id, position=4) is None
        assert await b.claim_message("o", "m3", fp, task.id) == PriorSend(task.id, fp, 4, False)
        await a.confirm_message("o", "m3", task.id)
        assert await b.claim_message("o", "m3", fp, task.id) == PriorSend(task.id, fp, 4, True)


async def test_a_released_claim_of_a_stored_queued_run_stays(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A detached send whose CREATE was stored but whose reply was lost looks failed to its
    sender, which releases its claim: the claim stays (the queued run will execute), so the
    resend finds that task and does not run the message a second time (PostgreSQL had this bug:
    claims.release). An interactive task's claim, and a claim whose task was never stored, go:
    their resends run anew."""
    from scoped_a2a.protocol.errors import ServerUnavailable
    from scoped_a2a.store.redis import open_redis_store

    from .test_redis_store import new_task

    fp = b"f" * 16
    async with open_redis_store(redis_server.url) as store:
        batcher = store.conn.batcher
        send_batch = batcher._call
        lost = [True]

        async def reply_lost(fn: Callable[[], Any]) -> Any:
            await send_batch(fn)  # Redis executes the batch ...
            if lost[0]:
                lost[0] = False
                raise ServerUnavailable("the reply was lost")  # ... its sender never hears
            return None

        queued = new_task()
        assert await store.claim_message("o", "m1", fp, queued.id) is None
        monkeypatch.setattr(batcher, "_call", reply_lost)
        with pytest.raises(ServerUnavailable):
            await store.queue.submit(queued, queued.history[0], request_metadata=None,
                                     detach_reason="test", owner="o")
        monkeypatch.setattr(batcher, "_call", send_batch)
        assert not lost[0], "the CREATE's reply was not the one lost"
        await store.release_message("o", "m1", queued.id)  # what the failed send does
        got = await store.claim_message("o", "m1", fp, "resent")
        assert got == PriorSend(queued.id, fp, 0, True), (
            f"the resend of a stored queued run's message got {got} (None: it runs again)")

        interactive = new_task()
        assert await store.claim_message("o", "m2", fp, interactive.id) is None
        await store.create(interactive, owner="o")
        await store.release_message("o", "m2", interactive.id)
        assert await store.claim_message("o", "m2", fp, "resent") is None  # it runs anew

        never = new_task()
        assert await store.claim_message("o", "m3", fp, never.id) is None
        await store.release_message("o", "m3", never.id)
        assert await store.claim_message("o", "m3", fp, "resent") is None


async def test_a_follow_up_handed_to_another_replica_says_whether_the_rule_detached_it(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    """Issue 30's marker across a hand-over: the follow-up to a task waiting for input, sent to
    the replica that does not hold its run, is answered (returnImmediately) with the task
    working and saying whether a --detach-metadata rule detached the run it resumes; the
    stored task says the same once the run's first event is folded (on the holder)."""
    rule = "evoai_crm_event=inactivity_action"
    a = spawn("serve", "--store", redis_server.url, "--port", "0", "--agent", AGENT,
              "--detach-metadata", rule)
    b = spawn("serve", "--store", redis_server.url, "--port", "0", "--agent", AGENT,
              "--detach-metadata", rule)
    url_a, url_b = await a.url(), await b.url()
    async with httpx.AsyncClient(timeout=30) as client:
        for crm in (True, False):
            asked = (await rpc(client, url_a, "SendMessage", params(text_message("ask"))))[
                "result"]["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
            holders = [p for p in (a, b) if f"agent run task={asked['id']}" in p.text()]
            assert len(holders) == 1, (a.text()[-2000:], b.text()[-2000:])
            other = url_b if holders[0] is a else url_a  # the follow-up is handed over
            meta = {"metadata": {"evoai_crm_event": "inactivity_action"}} if crm else {}
            answer = text_message("Ann", taskId=asked["id"], **meta)
            body = await rpc(client, other, "SendMessage", params(answer, detached=True))
            said = body["result"]["task"]
            ended = await wait_ended(client, other, asked["id"])
            want = {"detachedBy": f"rule {rule}"} if crm else None
            assert said["status"]["state"] == "TASK_STATE_WORKING", said
            assert said.get("metadata") == want, said
            assert ended["status"]["state"] == "TASK_STATE_COMPLETED", ended
            assert ended.get("metadata") == want, ended
