"""A rolling restart loses nothing, on Redis and on PostgreSQL: real ``serve`` processes under
load, one SIGTERMed and started again while the other serves (both backends).

Replica A takes 3 detached runs with a push config each (A watches them) and 3 without, all
running on A's worker; then replica B starts, 3 interactive streams run on A, and a client keeps
sending to B. A is SIGTERMed (``--grace 1``): its interactive callers are answered (the final
``canceled`` event, reason ``shutdown``, before their stream ends), it exits 0, its detached
runs are left in the queue and completed by B's worker (attempt 2, each exactly once), its push
watches are handed over at once (A logs each) and B pushes each task's end exactly once; every
call sent to B meanwhile is answered; a new A serves again.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import anyio
import httpx
import pytest

from ..helpers import rpc, sse_events, text_message
from ..push_receiver import Receiver, eventually, receiving
from ..redis.util import log_of
from .conftest import Fleet, states_of
from .test_fleet_push import has, send_with_push

# conftest: 3.11 only; fleet/conftest: Redis on asyncio and PostgreSQL on trio only.
pytestmark = [pytest.mark.anyio, pytest.mark.one_python("3.13"), pytest.mark.pairs]
OPTS = ("--lease", "2", "--claim-idle", "1", "--grace", "1",
        "--allow-webhook-host", "127.0.0.1")
PUSHED, DETACHED, INTERACTIVE = 3, 3, 3
V1 = {"A2A-Version": "1.0"}


async def test_a_rolling_restart_under_load_loses_nothing(fleet: Fleet) -> None:
    a = fleet.serve(*OPTS)
    url_a = await a.url()
    receiver = Receiver()
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    async with receiving(receiver) as hook, httpx.AsyncClient(timeout=30,
                                                              limits=limits) as client:
        pushed = [await send_with_push(client, url_a, "first-sleep 30", hook)
                  for _ in range(PUSHED)]
        detached = []
        for _ in range(DETACHED):
            sent = await rpc(client, url_a, "SendMessage", {
                "message": text_message("first-sleep 30"),
                "configuration": {"returnImmediately": True}})
            detached.append(sent["result"]["task"]["id"])
        with anyio.fail_after(30):  # all of them running on A's worker
            while a.text().count("mode=detached") < PUSHED + DETACHED:
                await anyio.sleep(0.05)
        b = fleet.serve(*OPTS)
        url_b = await b.url()

        answered: list[dict[str, Any]] = []  # the last event of each interactive stream on A
        streaming = anyio.Event()

        async def interactive() -> None:
            req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                   "params": {"message": text_message(f"sleep-in {a.pid} 60")}}
            last: dict[str, Any] = {}
            async with client.stream("POST", url_a, json=req, headers=V1) as resp:
                async for _, event in sse_events(resp):
                    last = event
                    if "task" in event.get("result", {}):
                        streamed.append(event)
                        if len(streamed) == INTERACTIVE:
                            streaming.set()
            answered.append(last)

        streamed: list[dict[str, Any]] = []
        steady: list[dict[str, Any]] = []
        stop = anyio.Event()

        async def load_on_b() -> None:
            while not stop.is_set():
                steady.append(await rpc(client, url_b, "SendMessage",
                                        {"message": text_message("quick")}))

        async with anyio.create_task_group() as tg:
            for _ in range(INTERACTIVE):
                tg.start_soon(interactive)
            tg.start_soon(load_on_b)
            with anyio.fail_after(30):
                await streaming.wait()
            await eventually(lambda: has(receiver, pushed, "TASK_STATE_WORKING"), 20)
            a.popen.terminate()  # SIGTERM: a rolling restart's first step
            termed = time.monotonic()
            with anyio.fail_after(30):
                while a.popen.poll() is None:
                    await anyio.sleep(0.05)
            exited = time.monotonic() - termed
            a2 = fleet.serve(*OPTS)  # ... and its second
            url_a2 = await a2.url()
            after = await rpc(client, url_a2, "SendMessage", {"message": text_message("quick")})
            stop.set()
        assert a.popen.returncode == 0, a.text()[-3000:]
        assert after["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", after

        # Its interactive callers were answered: the end, then the stream closed.
        assert len(answered) == INTERACTIVE, answered
        for last in answered:
            status = last["result"]["statusUpdate"]["status"]
            assert status["state"] == "TASK_STATE_CANCELED", last
            assert status["message"]["metadata"] == {"reason": "shutdown"}, last
        # Every call to B was answered.
        assert steady and all(
            r.get("result", {}).get("task", {}).get("status", {}).get("state")
            == "TASK_STATE_COMPLETED" for r in steady), [r for r in steady if "error" in r][:3]

        # Its detached runs moved on through the queue, each completed exactly once.
        async with fleet.store() as store:
            with anyio.fail_after(30):
                for task_id in pushed + detached:
                    while True:
                        starts, states = await log_of(store, task_id)
                        if "COMPLETED" in states:
                            break
                        await anyio.sleep(0.1)
                    assert states.count("COMPLETED") == 1, (task_id, states)
                    assert [s["attempt"] for s in starts] == [1, 2], (task_id, starts)
                    assert starts[0]["pid"] == a.pid != starts[1]["pid"], starts

        # Its push deliveries went out, once: the watches were handed over at SIGTERM.
        await eventually(lambda: has(receiver, pushed, "TASK_STATE_COMPLETED"), 20)
        print(f"{fleet.kind}: A exited {exited:.2f} s after SIGTERM; every run completed and "
              f"every end pushed {time.monotonic() - termed:.2f} s after it; {len(steady)} "
              "calls to B answered meanwhile")
    got = states_of(receiver.accepted())
    for task_id in pushed:
        assert got[task_id].count("TASK_STATE_COMPLETED") == 1, (task_id, got[task_id])
        assert len(got[task_id]) == len(set(got[task_id])), (task_id, got[task_id])
    keys = Counter(r.headers["idempotency-key"] for r in receiver.accepted())
    assert max(keys.values()) == 1, keys.most_common(3)
    # Each watch was handed over at SIGTERM, or (its run finished on B before A's watch was
    # released) delivered the end itself on its way out: one or the other, never both.
    text = a.text()
    for task_id in pushed:
        left = re.search(rf"push watch of task {task_id} .* left to another replica", text)
        ended_here = bool(re.search(
            rf"push delivered task={task_id} config=\S+ state=completed", text))
        assert bool(left) != ended_here, (task_id, text[-3000:])
    assert text.count("left to another replica") >= 1, text[-3000:]
