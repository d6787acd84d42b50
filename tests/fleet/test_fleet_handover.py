"""Any replica answers any call, on Redis and on PostgreSQL: follow-ups to a run parked on one
replica, sent through another, are handed over (runtime/handover.py; Redis pub/sub, PostgreSQL
LISTEN/NOTIFY) and answered from the shared log. Real ``serve`` processes, both backends.

Replicas A and B behind a round-robin client: conversations of ask -> answer (100 on Redis, 20
on PostgreSQL), each answer through the replica that does not hold the run (half as blocking
sends, half as streams); all complete, each on its holder, with the whole answer (one is larger
than a NOTIFY payload: PostgreSQL carries it through its ``handover`` table, which the test
checks; there a forged, unsealed envelope is dropped too). A second answer to a run no longer
waiting is refused as the holder would refuse it; a caller that hangs up on a handed-over
follow-up cancels the run (reason hang-up). The *sender* SIGKILLed while its caller follows a
handed-over answer: the holder drops the hold it kept for that caller once the sender's lease
lapsed, which cancels the run as a hang-up would (it used to run on, held for nobody). The
holder SIGKILLed while its run waits: an answer through another replica is answered by the
lease rule (canceled, process-lost).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.protocol.types import Message, Part, Role
from scoped_a2a.store.handover import HAND, Envelope, encode
from scoped_a2a.store.liveness import LOST_REASON

from ..helpers import rpc, sse_events, text_message
from .conftest import Fleet

pytestmark = pytest.mark.anyio
CONVERSATIONS = {"redis": 100, "postgres": 20}
BIG = 20_000  # characters of the large answer (> the 8000-byte NOTIFY payload limit)
LEASE = 2.0
V1 = {"A2A-Version": "1.0"}


def answer_to(task: dict[str, Any], text: str) -> dict[str, Any]:
    return text_message(text, taskId=task["id"], contextId=task["contextId"])


async def stream(client: httpx.AsyncClient, url: str, params: dict[str, Any]
                 ) -> list[dict[str, Any]]:
    req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    async with client.stream("POST", url, json=req, headers=V1) as resp:
        return [event async for _, event in sse_events(resp)]


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
@pytest.mark.pairs
async def test_answers_through_the_other_replica(fleet: Fleet) -> None:
    a, b, c = (fleet.serve("--lease", str(LEASE)) for _ in range(3))
    urls = [await a.url(), await b.url()]
    url_c = await c.url()
    procs = [a, b]
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    done: dict[int, str] = {}
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def conversation(i: int) -> None:
            first, other = urls[i % 2], urls[(i + 1) % 2]
            asked = (await rpc(client, first, "SendMessage",
                               {"message": text_message("ask")}))["result"]["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
            name = f"n{i}" + ("x" * BIG if i == 3 else "")
            if i % 4 < 2:
                got = await rpc(client, other, "SendMessage", {"message": answer_to(asked, name)})
                assert "result" in got, str(got)[:500]
                final = got["result"]["task"]
            else:
                events = await stream(client, other, {"message": answer_to(asked, name)})
                assert "result" in events[-1], str(events[-1])[:500]
                final = events[-1]["result"]["statusUpdate"]
            assert final["status"]["state"] == "TASK_STATE_COMPLETED", str(final)[:500]
            text = final["status"]["message"]["parts"][0]["text"]
            # It ran on its holder, with the whole answer.
            assert text.startswith(f"hi {name} pid={procs[i % 2].pid}"), text[:200]
            done[i] = asked["id"]

        async with anyio.create_task_group() as tg:
            for i in range(CONVERSATIONS[fleet.kind]):
                tg.start_soon(conversation, i)
        assert len(done) == CONVERSATIONS[fleet.kind]

        if fleet.kind == "postgres":
            await _postgres_envelopes(fleet, client, urls[0], a)

        # A second answer, through the other replica, to a run no longer waiting: the holder's
        # refusal (-32004 "working"), or the task's end, exactly as on the holder.
        asked = (await rpc(client, urls[0], "SendMessage",
                           {"message": text_message("ask")}))["result"]["task"]
        first = await rpc(client, urls[1], "SendMessage", {"message": answer_to(asked, "x")})
        assert first["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", first
        again = await rpc(client, urls[1], "SendMessage", {"message": answer_to(asked, "y")})
        assert again["error"]["code"] == -32004, again

        # A caller that hangs up on its handed-over answer cancels the run, as on the holder.
        asked = (await rpc(client, urls[0], "SendMessage",
                           {"message": text_message("ask 60")}))["result"]["task"]
        req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
               "params": {"message": answer_to(asked, "z")}}
        async with client.stream("POST", urls[1], json=req, headers=V1) as resp:
            async for _ in sse_events(resp):
                break  # hang up after the first event (the task resumed, working)
        await a.wait_for(rf"run end task={asked['id']} outcome=canceled .*reason=hang-up",
                         timeout=20)

        # The sender (C) dies while its caller follows a handed-over answer: the hold B keeps
        # for that caller goes once C's lease lapsed, and the run ends as on a hang-up.
        asked = (await rpc(client, urls[1], "SendMessage",
                           {"message": text_message("ask 60")}))["result"]["task"]
        resumed = anyio.Event()
        async with anyio.create_task_group() as tg:
            async def follow() -> None:
                req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                       "params": {"message": answer_to(asked, "orphan")}}
                try:
                    async with client.stream("POST", url_c, json=req, headers=V1) as resp:
                        async for _ in sse_events(resp):
                            resumed.set()  # handed over: B holds the run for this caller
                except httpx.HTTPError:
                    pass  # C was killed under it

            tg.start_soon(follow)
            with anyio.fail_after(20):
                await resumed.wait()
            c.kill()
        await b.wait_for(rf"run end task={asked['id']} outcome=canceled .*reason=hang-up",
                         timeout=LEASE * 2 + 5)
        assert "the hold kept for its caller goes" in b.text(), b.text()[-2000:]

        # The holder is SIGKILLed while its run waits: the answer through the other replica is
        # answered by the lease rule.
        asked = (await rpc(client, urls[0], "SendMessage",
                           {"message": text_message("ask")}))["result"]["task"]
        a.kill()
        got = await rpc(client, urls[1], "SendMessage", {"message": answer_to(asked, "late")})
        final = got["result"]["task"]
        assert final["status"]["state"] == "TASK_STATE_CANCELED", got
        assert final["status"]["message"]["metadata"] == {"reason": LOST_REASON}, got


async def _postgres_envelopes(fleet: Fleet, client: httpx.AsyncClient, url: str,
                              holder: Any) -> None:
    """PostgreSQL only: the large answer went through the ``handover`` table, and a forged
    (unsealed) NOTIFY, which any role of the database may send, is dropped."""
    async with fleet.store() as store:
        carried = await store.pool.query("SELECT length(body) FROM handover")
        assert [n > BIG for (n,) in carried] == [True], carried  # the large answer's
        asked = (await rpc(client, url, "SendMessage",
                           {"message": text_message("ask")}))["result"]["task"]
        forged = encode(Envelope(HAND, "forged", sender="nobody", task_id=asked["id"],
                                 message=Message(message_id="forged", role=Role.USER,
                                                 parts=[Part(text="evil")],
                                                 task_id=asked["id"],
                                                 context_id=asked["contextId"])))
        payload = f"* {base64.b64encode(forged).decode()}"
        await store.pool.run(lambda c: c.execute(
            "SELECT pg_notify(%s, %s)", (store.handover.channel, payload)))
        await holder.wait_for("dropped a hand-over envelope that does not open")
        got = (await rpc(client, url, "GetTask", {"id": asked["id"]}))["result"]
        assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", got


@pytest.mark.pairs
async def test_a_follow_up_a_rule_detaches_says_so_through_the_other_replica(
        fleet: Fleet) -> None:
    """The CRM event arriving in a conversation whose run waits on replica A, sent through B
    with ``returnImmediately`` (a polled caller): B's answer says the run is detached
    (``detachedBy``), and so does the stored task once A's run records the message, so a
    client giving up on that turn leaves it running. The same through B without the rule's
    metadata says nothing: that turn is the caller's."""
    rule = ("--detach-metadata", "evoai_crm_event=inactivity_action")
    a, b = fleet.serve(*rule), fleet.serve(*rule)
    urls = [await a.url(), await b.url()]
    detached = {"returnImmediately": True}
    async with httpx.AsyncClient(timeout=30) as client:
        for crm in (True, False):
            sent = await rpc(client, urls[0], "SendMessage", {"message": text_message("ask 60")})
            assert "result" in sent, (crm, sent)
            asked = sent["result"]["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
            answer = answer_to(asked, "crm" if crm else "me")
            if crm:
                answer["metadata"] = {"evoai_crm_event": "inactivity_action"}
            got = await rpc(client, urls[1], "SendMessage",
                            {"message": answer, "configuration": detached})
            assert "result" in got, (crm, got)
            task = got["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_WORKING", task
            assert ("detachedBy" in task.get("metadata", {})) is crm, task
            with anyio.fail_after(20):  # A's run records the answer, with the marker
                while True:
                    stored = (await rpc(client, urls[1], "GetTask",
                                        {"id": asked["id"]}))["result"]
                    if len(stored.get("history", ())) >= 3:
                        break
                    await anyio.sleep(0.05)
            assert ("detachedBy" in stored.get("metadata", {})) is crm, stored
            await rpc(client, urls[0], "CancelTask", {"id": asked["id"]})


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
@pytest.mark.pairs
async def test_another_caller_reaches_no_run_through_the_replica_that_does_not_hold_it(
    fleet: Fleet,
) -> None:
    """The hand-over carries what the method layer let through, and nothing checks the
    caller again past it (the holder trusts its replicas): so every way in through the other
    replica must stop a caller without credentials, or with another caller's, before it. Bob,
    and a caller with no key, try Alice's run parked on A through B: a follow-up (and a resend
    of Alice's own follow-up under Bob's key), a cancel, a subscription, a read. Each is
    refused as "not found" (401 without a key), the run goes on waiting, and Alice's answer
    through B is the one it gets."""
    keys = fleet.tmp / "keys.txt"
    keys.write_text("alice:alice-key\nbob:bob-key\n")
    alice, bob = {"X-API-Key": "alice-key"}, {"X-API-Key": "bob-key"}
    a, b = (fleet.serve("--lease", str(LEASE), "--api-keys", str(keys)) for _ in range(2))
    url_a, url_b = await a.url(), await b.url()
    async with httpx.AsyncClient(timeout=30) as client:
        asked = (await rpc(client, url_a, "SendMessage", {"message": text_message("ask")},
                           headers=alice))["result"]["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
        answer = answer_to(asked, "alice")
        tries = [("SendMessage", {"message": answer_to(asked, "evil")}),
                 ("SendMessage", {"message": answer}),  # Alice's messageId, Bob's key
                 ("SendStreamingMessage", {"message": answer_to(asked, "evil")}),
                 ("CancelTask", {"id": asked["id"]}),
                 ("SubscribeToTask", {"id": asked["id"]}),
                 ("GetTask", {"id": asked["id"]})]
        for method, params in tries:
            got = await _first_answer(client, url_b, method, params, bob)
            assert got.get("error", {}).get("code") == -32001, (method, got)
            nobody = await client.post(url_b, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                    "params": params}, headers=V1)
            assert nobody.status_code == 401, (method, nobody.status_code, nobody.text[:300])
        now = (await rpc(client, url_a, "GetTask", {"id": asked["id"]}, headers=alice))
        assert now["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", now
        got = await rpc(client, url_b, "SendMessage", {"message": answer}, headers=alice)
        final = got["result"]["task"]
        assert final["status"]["state"] == "TASK_STATE_COMPLETED", got
        text = final["status"]["message"]["parts"][0]["text"]
        assert text.startswith(f"hi alice pid={a.pid}"), text[:200]
        said = [p.get("text") for m in final.get("history", []) for p in m["parts"]]
        assert "evil" not in said, said


async def _first_answer(client: httpx.AsyncClient, url: str, method: str,
                        params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """The JSON-RPC answer to one call, or the first event of a stream."""
    req = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with client.stream("POST", url, json=req, headers={**V1, **headers}) as resp:
        assert resp.status_code == 200, (method, resp.status_code)
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            async for _, event in sse_events(resp):
                return event
            raise AssertionError(f"{method}: an empty stream")
        body: dict[str, Any] = json.loads(await resp.aread())
        return body
