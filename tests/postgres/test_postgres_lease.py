"""A replica SIGKILLed with interactive runs in flight leaves nothing stuck, on PostgreSQL
(store/liveness.py, store/postgres/leases.py).

Two real ``serve`` processes on one PostgreSQL database, a 2 s liveness lease. Replica A gets 20
interactive streams (each message with a fixed messageId, as a client that resends it would
have); A is SIGKILLed while all of them run. Then, within the lease plus 5 s, every task reads
canceled with the reason ``process-lost`` through B; each message resent through B runs once
more (a new task, completed; a second resend answers with that same task). The tests whose
assertions are the same on Redis (a resend before the lease lapsed, a lone server restarted)
are in tests/fleet/test_fleet_lease.py, once for both stores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a.store.liveness import LOST_REASON
from scoped_a2a.store.postgres import open_postgres_store

from ..helpers import rpc, sse_events, text_message
from ..redis.conftest import Proc

pytestmark = [pytest.mark.anyio, pytest.mark.one_python]  # conftest: 3.11 only
LEASE = 2.0
INTERACTIVE = 20
V1 = {"A2A-Version": "1.0"}


async def test_sigkill_a_replica_with_interactive_runs_in_flight(
    pg_url: str, serve: Callable[..., Proc], tmp_path: Any,
) -> None:
    a = serve(pg_url, "--lease", str(LEASE))
    b = serve(pg_url, "--lease", str(LEASE))
    url_a, url_b = await a.url(), await b.url()
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    messages = [text_message(f"sleep-in {a.pid} 120") for _ in range(INTERACTIVE)]
    interactive: dict[str, dict[str, Any]] = {}  # task id -> its message
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def stream_on_a(message: dict[str, Any]) -> None:
            req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                   "params": {"message": message}}
            try:
                async with client.stream("POST", url_a, json=req, headers=V1) as resp:
                    async for _, event in sse_events(resp):
                        task = event["result"].get("task")
                        if task is not None:
                            interactive[task["id"]] = message
            except httpx.HTTPError:
                pass  # the replica was killed under it

        async with anyio.create_task_group() as tg:
            for message in messages:
                tg.start_soon(stream_on_a, message)
            # Every run has started on A (its start is logged after its task is stored).
            with anyio.fail_after(60):
                while a.text().count("mode=interactive") < INTERACTIVE \
                        or len(interactive) < INTERACTIVE:
                    await anyio.sleep(0.1)
            async with open_postgres_store(pg_url, key_file=tmp_path / "push.key") as store:
                for task_id in interactive:  # each one covered by A's lease
                    assert await store.leases.covers(task_id), task_id
            a.kill()
            killed = time.monotonic()
            tg.cancel_scope.cancel()

        # Within the lease plus 5 s: every interactive task reads canceled, process-lost.
        pending = set(interactive)
        with anyio.fail_after(LEASE + 5):
            while pending:
                for task_id in list(pending):
                    got = (await rpc(client, url_b, "GetTask", {"id": task_id}))["result"]
                    status = got["status"]
                    if status["state"] != "TASK_STATE_WORKING":
                        assert status["state"] == "TASK_STATE_CANCELED", got
                        assert status["message"]["metadata"] == {"reason": LOST_REASON}, got
                        pending.discard(task_id)
                await anyio.sleep(0.1)
        print(f"all {INTERACTIVE} interactive tasks canceled "
              f"{time.monotonic() - killed:.2f} s after SIGKILL")
        await b.wait_for(rf"process \S+ stopped renewing its lease: {INTERACTIVE} interactive")

        # Each message resent through B runs once more, as a new task; a second resend is it.
        reruns: dict[str, str] = {}

        async def resend(task_id: str) -> None:
            message = interactive[task_id]
            first = (await rpc(client, url_b, "SendMessage", {"message": message}))["result"]
            again = (await rpc(client, url_b, "SendMessage", {"message": message}))["result"]
            assert first["task"]["id"] != task_id, first
            assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED", first
            assert again["task"]["id"] == first["task"]["id"], (first, again)
            reruns[task_id] = first["task"]["id"]

        async with anyio.create_task_group() as tg:
            for task_id in interactive:
                tg.start_soon(resend, task_id)
        assert len(set(reruns.values())) == INTERACTIVE
        for new_id in reruns.values():
            assert b.text().count(f"run start task={new_id} ") == 1

    # The dead process is forgotten once none of its runs is left, and B's clean exit retires
    # its own lease (none of its runs still runs): only this test's store is left.
    b.stop()
    async with open_postgres_store(pg_url, key_file=tmp_path / "push.key") as store:
        with anyio.fail_after(LEASE + 5):
            while True:
                rows = await store.pool.query(
                    "SELECT id FROM processes WHERE id <> %s",
                    (store.leases.process_id,))
                if not rows:
                    break
                await anyio.sleep(0.1)


async def test_the_lease_is_renewed_while_every_pooled_connection_is_busy(
    pg_url: str, tmp_path: Any,
) -> None:
    # Under load every connection of the pool may be taken by requests for longer than a
    # lease: a renewal queued behind them let a live replica's lease lapse, and another replica
    # recorded its waiting runs lost (a fleet hand-over test, under load). The renewal has a
    # connection of its own: here the pool's only one is held while the lease is renewed.
    async with open_postgres_store(pg_url, key_file=tmp_path / "push.key", pool_size=1,
                                   lease=LEASE) as store:
        release = anyio.Event()
        held = anyio.Event()

        async def hold_the_pool(conn: Any) -> None:
            held.set()
            await release.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(store.pool.run, hold_the_pool)
            await held.wait()
            # A hang guard, not a timing: without its own connection the renewal waits for
            # the held one, which is released only after this block.
            try:
                with anyio.fail_after(10):
                    renewed = await store.leases.beat()
                    lapsed = await store.leases.lapsed()
            finally:
                release.set()  # the held work is shielded: let it end, or the test hangs
        assert renewed, "the lease had lapsed although it was renewed in time"
        assert lapsed == [], lapsed
