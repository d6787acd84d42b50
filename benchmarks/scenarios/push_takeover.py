"""The push-takeover row of the ``workers`` scenario: SIGKILL the replica that watches the push
configs, time until another has pushed every end that fell due (store/push_watches.py).

Two replicas over one redis-server: A (``--no-worker``) accepts detached sends carrying a push
config, so A watches them and pushes their ``working``; B's worker runs them (``slow KEY 3``).
Once every ``working`` has arrived, A is SIGKILLed; with ``--lease 2`` B adopts A's watches
once A's lease has lapsed and pushes each ``completed``. Recorded: seconds from the kill until
every end was pushed, seconds the last end was pushed after its run ended (the agent's ``done``
signal), and how many deliveries arrived twice (same ``Idempotency-Key``; 0 expected).
The webhook receiver here answers 200 to every POST.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

from ..core import Bench
from ..loadgen import connect, http_request, message_params, rpc_body
from ..systems import System
from .redis_store import RedisServer

LEASE = 2.0
LABEL = f"push takeover (SIGKILL the watching replica, lease {LEASE:g} s)"
COMPLETED = "TASK_STATE_COMPLETED"


class Hooks:
    """A webhook receiver: each POST's arrival time, ``Idempotency-Key`` and JSON body."""

    def __init__(self) -> None:
        self.got: list[tuple[float, str, dict[str, Any]]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                fields = {k.strip().lower(): v.strip()
                          for k, _, v in (line.partition(":") for line in head[1:] if line)}
                body = await reader.readexactly(int(fields.get("content-length", "0")))
                self.got.append((time.monotonic(), fields.get("idempotency-key", ""),
                                 json.loads(body) if body else {}))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def states(self, state: str) -> dict[str, float]:
        """Task id -> when its first delivery of ``state`` arrived."""
        out: dict[str, float] = {}
        for at, _, body in self.got:
            update = body.get("statusUpdate") or body.get("task") or {}
            task_id = update.get("taskId") or update.get("id")
            if (isinstance(task_id, str) and update.get("status", {}).get("state") == state
                    and task_id not in out):
                out[task_id] = at
        return out

    def twice(self) -> int:
        """Deliveries that arrived more than once (the same delivery id)."""
        return sum(n - 1 for n in Counter(key for _, key, _ in self.got).values())


async def _until(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def measure_push_takeover(bench: Bench, server: str, redis: RedisServer) -> None:
    """Record the push-takeover row for ``server`` (hypercorn-asyncio or -trio)."""
    n = 10 if bench.sizes.quick else 40
    hooks = Hooks()
    listener = await asyncio.start_server(hooks.handle, "127.0.0.1", 0)
    hook = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/hook"
    shared = ("--store", redis.url, "--redis-prefix", f"p-{server}", "--lease", f"{LEASE:g}",
              "--claim-idle", "1", "--allow-webhook-host", "127.0.0.1")
    a = System("scoped", server, (*shared, "--no-worker"))
    b = System("scoped", server, shared)
    try:
        async with bench.servers([a, b]) as running:
            if a not in running or b not in running:
                return
            proc_a = running[a]
            ids: dict[str, str] = {}  # task id -> the run's side-channel key
            async with await connect(proc_a.port) as conn:
                for i in range(n):
                    key = f"pt-{server}-{i}"
                    params = message_params(f"slow {key} 3", return_immediately=True)
                    params.setdefault("configuration", {})[
                        "taskPushNotificationConfig"] = {"url": hook}
                    status, body = await conn.request(http_request(
                        proc_a.port, rpc_body("SendMessage", params)))
                    if status != 200 or "result" not in json.loads(body):
                        bench.fail(f"{LABEL} / {server}: send {status} {body[:200]!r}")
                        return
                    ids[json.loads(body)["result"]["task"]["id"]] = key
            if not await _until(lambda: set(hooks.states("TASK_STATE_WORKING")) >= set(ids), 30):
                bench.fail(f"{LABEL} / {server}: A did not push every working")
                return
            await asyncio.sleep(0.3)  # A records each delivery after it is answered
            proc_a.proc.kill()
            killed = time.monotonic()
            if not await _until(lambda: set(hooks.states(COMPLETED)) >= set(ids), 60):
                bench.fail(f"{LABEL} / {server}: not every end was pushed within 60 s")
                return
            await asyncio.sleep(1.0)  # a second copy would arrive about as soon
            ends = hooks.states(COMPLETED)
            last = max(ends[t] for t in ids)
            done = [bench.signals.stamps.get(("done", key)) for key in ids.values()]
            due = max((d for d in done if d is not None), default=killed)
            bench.record(LABEL, server, "push_all_s", last - killed, "s", role="subject")
            bench.record(LABEL, server, "push_late_s", last - max(due, killed), "s",
                         role="subject")
            bench.record(LABEL, server, "push_twice", float(hooks.twice()), "", role="subject")
            bench.progress(f"{server}: every end pushed {last - killed:.2f} s after SIGKILL "
                           f"({hooks.twice()} twice)")
    finally:
        listener.close()
