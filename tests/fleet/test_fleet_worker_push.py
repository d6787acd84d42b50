"""A fleet of ``worker`` processes alone delivers the pushes a stopped ``serve`` left
(cli/queue_work.py, push/fleet.py), on Redis and on PostgreSQL, with real processes and a real
webhook receiver, both backends.

Two workers execute the queue; one ``serve --no-worker`` accepts detached sends with a push
config each (so it watches them and pushes their ``working``), then is SIGTERMed while every
run is still going on a worker: it hands its watches over, the workers adopt them (each watch
by one of them) and each task's ``completed`` is pushed exactly once, with no ``serve`` left.
"""

from __future__ import annotations

from collections import Counter

import anyio
import httpx
import pytest

from ..push_receiver import Receiver, eventually, receiving
from .conftest import Fleet, states_of, watched_states
from .test_fleet_push import has, send_with_push

# tests/conftest.py: Python 3.11 only; fleet/conftest: Redis on asyncio and PostgreSQL on trio.
pytestmark = [pytest.mark.anyio, pytest.mark.one_python(), pytest.mark.pairs]
TASKS = 4
OPTS = ("--lease", "2", "--claim-idle", "1", "--grace", "1",
        "--allow-webhook-host", "127.0.0.1")


async def test_a_worker_only_fleet_pushes_what_a_stopped_server_left_once(fleet: Fleet
                                                                          ) -> None:
    workers = [fleet.serve(*OPTS, command="worker") for _ in range(2)]
    for w in workers:
        await w.wait_for(r"worker \S+ started")
    a = fleet.serve("--no-worker", *OPTS)
    url_a = await a.url()
    receiver = Receiver()
    async with receiving(receiver) as hook, httpx.AsyncClient(timeout=30) as client:
        ids = [await send_with_push(client, url_a, "first-sleep 3", hook)
               for _ in range(TASKS)]
        await eventually(lambda: has(receiver, ids, "TASK_STATE_WORKING"), 20)
        with anyio.fail_after(20):  # ... and A recorded it: nothing is pushed twice
            while {(await watched_states(fleet)).get(t) for t in ids} != {"TASK_STATE_WORKING"}:
                await anyio.sleep(0.05)
        a.stop()  # SIGTERM: A hands its watches over; only workers are left
        assert a.popen.returncode == 0, a.text()[-3000:]
        await eventually(lambda: has(receiver, ids, "TASK_STATE_COMPLETED"), 30)
        # A second watcher of any config would push its end about as soon as the first did.
        await anyio.sleep(1.5)
    got = states_of(receiver.accepted())
    for task_id in ids:
        assert got[task_id].count("TASK_STATE_COMPLETED") == 1, (task_id, got[task_id])
        assert got[task_id].count("TASK_STATE_WORKING") == 1, (task_id, got[task_id])
    keys = Counter(r.headers["idempotency-key"] for r in receiver.accepted())
    assert max(keys.values()) == 1, keys.most_common(3)
    logs = "".join(w.text() for w in workers)
    adopted = [t for t in ids if f"push watch of task {t} config" in logs]
    assert sorted(adopted) == sorted(ids), logs[-3000:]
    assert logs.count("adopted from a stopped process") == TASKS, logs[-3000:]
