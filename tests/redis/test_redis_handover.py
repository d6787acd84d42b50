"""Any replica answers any call: follow-ups to a run parked on one replica, sent through the
other, are handed over (runtime/handover.py) and answered from the shared log.

Two real ``serve`` processes on one Redis behind a round-robin client: 100 conversations of
ask -> answer, each answer through the replica that does not hold the run (half as blocking
sends, half as streams); all complete, each answer reached its run once. A second answer to a
run that is no longer waiting is refused as the holder would refuse it; a caller that hangs up
on a handed-over follow-up cancels the run (reason hang-up) as it would on the holder; and if
the holder is SIGKILLed while its run waits, an answer through the other replica is answered
by the lease rule (canceled, process-lost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.store.liveness import LOST_REASON

from ..helpers import rpc, sse_events, text_message
from .conftest import Proc, RedisServer

pytestmark = pytest.mark.anyio
CONVERSATIONS = 100
V1 = {"A2A-Version": "1.0"}


def answer_to(task: dict[str, Any], text: str) -> dict[str, Any]:
    return text_message(text, taskId=task["id"], contextId=task["contextId"])


async def stream(client: httpx.AsyncClient, url: str, params: dict[str, Any]
                 ) -> list[dict[str, Any]]:
    req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    async with client.stream("POST", url, json=req, headers=V1) as resp:
        return [event async for _, event in sse_events(resp)]


async def test_answers_through_the_other_replica(
    redis_server: RedisServer, spawn: Callable[..., Proc],
) -> None:
    opts = ["--store", redis_server.url, "--port", "0", "--lease", "2"]
    a, b = spawn("serve", *opts), spawn("serve", *opts)
    urls = [await a.url(), await b.url()]
    procs = [a, b]
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    done: dict[int, str] = {}
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def conversation(i: int) -> None:
            first, other = urls[i % 2], urls[(i + 1) % 2]
            asked = (await rpc(client, first, "SendMessage",
                               {"message": text_message("ask")}))["result"]["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
            name = f"n{i}"
            if i % 4 < 2:
                got = await rpc(client, other, "SendMessage", {"message": answer_to(asked, name)})
                assert "result" in got, got
                final = got["result"]["task"]
            else:
                events = await stream(client, other, {"message": answer_to(asked, name)})
                assert "result" in events[-1], events[-1]
                final = events[-1]["result"]["statusUpdate"]
            assert final["status"]["state"] == "TASK_STATE_COMPLETED", final
            text = final["status"]["message"]["parts"][0]["text"]
            assert text.startswith(f"hi {name} pid={procs[i % 2].pid}"), text  # ran on its holder
            done[i] = asked["id"]

        async with anyio.create_task_group() as tg:
            for i in range(CONVERSATIONS):
                tg.start_soon(conversation, i)
        assert len(done) == CONVERSATIONS

        # A second answer, through the other replica, to a run no longer waiting: the holder's
        # refusal (-32004 "working"), or the task's end, exactly as on the holder.
        asked = (await rpc(client, urls[0], "SendMessage",
                           {"message": text_message("ask")}))["result"]["task"]
        first = await rpc(client, urls[1], "SendMessage", {"message": answer_to(asked, "x")})
        assert first["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
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

        # The holder is SIGKILLed while its run waits: the answer through the other replica is
        # answered by the lease rule.
        asked = (await rpc(client, urls[0], "SendMessage",
                           {"message": text_message("ask")}))["result"]["task"]
        a.kill()
        got = await rpc(client, urls[1], "SendMessage", {"message": answer_to(asked, "late")})
        final = got["result"]["task"]
        assert final["status"]["state"] == "TASK_STATE_CANCELED", got
        assert final["status"]["message"]["metadata"] == {"reason": LOST_REASON}, got
