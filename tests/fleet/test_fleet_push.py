"""Push deliveries survive their replica (store/push_watches.py, push/fleet.py), on Redis and on
PostgreSQL, with real ``serve`` processes and a real webhook receiver, both backends.

Replica A accepts five detached sends with a push config each, so A watches them (and pushes
their ``working``); A is SIGKILLed while every run is still going. Replica B adopts each watch
once A's 2 s lease has lapsed and pushes each task's ``completed`` exactly once (each delivery
id once, none of the earlier states again). A replica that is stopped cleanly instead hands
its watches over at once: tests/fleet/test_fleet_rolling.py.
"""

from __future__ import annotations

import time
from collections import Counter

import anyio
import httpx
import pytest

from ..helpers import rpc, text_message
from ..push_receiver import Receiver, eventually, receiving
from .conftest import Fleet, states_of, watched_states

# conftest: 3.11 only; fleet/conftest: Redis on asyncio and PostgreSQL on trio only.
pytestmark = [pytest.mark.anyio, pytest.mark.one_python("3.13"), pytest.mark.pairs]
TASKS = 5
OPTS = ("--lease", "2", "--claim-idle", "1", "--grace", "1",
        "--allow-webhook-host", "127.0.0.1")


async def send_with_push(client: httpx.AsyncClient, url: str, text: str, hook: str) -> str:
    sent = await rpc(client, url, "SendMessage", {
        "message": text_message(text),
        "configuration": {"returnImmediately": True,
                          "taskPushNotificationConfig": {"url": hook}}})
    assert "result" in sent, sent
    task_id: str = sent["result"]["task"]["id"]
    return task_id


def has(receiver: Receiver, task_ids: list[str], state: str) -> bool:
    got = states_of(receiver.accepted())
    return all(state in got.get(t, []) for t in task_ids)


async def test_a_killed_replicas_due_pushes_are_made_by_another_once(fleet: Fleet) -> None:
    a, b = fleet.serve(*OPTS), fleet.serve(*OPTS)
    url_a, url_b = await a.url(), await b.url()
    receiver = Receiver()
    async with receiving(receiver) as hook, httpx.AsyncClient(timeout=30) as client:
        ids = [await send_with_push(client, url_a, "first-sleep 4", hook) for _ in range(TASKS)]
        await eventually(lambda: has(receiver, ids, "TASK_STATE_WORKING"), 20)
        # ... and A recorded it (a kill between a delivery and its record is the one case
        # where the adopter delivers again, with the same delivery id: store/push_watches.py).
        with anyio.fail_after(20):
            while True:
                recorded = await watched_states(fleet)
                if {recorded.get(t) for t in ids} == {"TASK_STATE_WORKING"}:
                    break
                await anyio.sleep(0.05)
        a.kill()
        killed = time.monotonic()
        await eventually(lambda: has(receiver, ids, "TASK_STATE_COMPLETED"), 30)
        print(f"{fleet.kind}: every end pushed {time.monotonic() - killed:.2f} s after SIGKILL")
        # A marker through B, pushed after the others: a second copy of any of them would
        # have been sent before it (one watcher per config, each in log order).
        marker = await send_with_push(client, url_b, "quick", hook)
        await eventually(lambda: has(receiver, [marker], "TASK_STATE_COMPLETED"), 20)
    got = states_of(receiver.accepted())
    for task_id in ids:
        states = got[task_id]
        assert states.count("TASK_STATE_COMPLETED") == 1, (task_id, states)
        assert len(states) == len(set(states)), (task_id, states)
    keys = Counter(r.headers["idempotency-key"] for r in receiver.accepted())
    assert max(keys.values()) == 1, keys.most_common(3)
    adopted = await b.wait_for(rf"push watch of task {ids[0]} config \S+ adopted")
    assert adopted
    assert _count(b.text(), "adopted from a stopped process") == TASKS, b.text()[-3000:]


def _count(text: str, what: str) -> int:
    return text.count(what)


