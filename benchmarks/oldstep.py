"""The baseline: a step and follower written the old way (plain asyncio, as in the incident).

This is deliberately the pattern scoped-a2a replaces, kept as it was, so the benchmark shows what
the structured version removes. It runs on Python 3.11, where ``asyncio.wait_for`` swallows a
cancellation that lands in the iteration its inner awaitable completes:

- the follower polls the agent's trajectory, waiting ``asyncio.wait_for(stop.wait(), 0.2)``
  between reads, and retries a failed read every 0.2 s with no end (also after ``stop``);
- on teardown the step sets ``stop`` and cancels the follower in the same loop tick, then waits
  for it with ``asyncio.wait``.

When the follower is in its ``wait_for`` at teardown (it is, after a successful read), ``stop``
completes the inner wait in the same tick as the cancel lands, 3.11 swallows the cancel, and the
follower reads again. Against an agent that is gone by then, every read fails and is retried every
0.2 s: the follower never ends and neither does the step.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

POLL = 0.2
TRAJECTORY_READ = "scoped_a2a/trajectory/read"
HEADERS = {"A2A-Version": "1.0"}


@dataclass
class OldStats:
    task_id: str | None = None
    failed_reads: int = 0
    failed_after_stop: int = 0
    turn_end: float | None = None
    t0: float | None = None
    end: float | None = None
    events: int = 0
    told: asyncio.Event | None = field(default=None, repr=False)
    """Set (by the step) when the step starts to end; the benchmark's harness waits on it."""


async def _rpc(http: httpx.AsyncClient, url: str, method: str, params: Any) -> Any:
    r = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                   "params": params}, headers=HEADERS)
    r.raise_for_status()
    body = r.json()
    if "error" in body:
        raise RuntimeError(body["error"])
    return body["result"]


async def old_follower(http: httpx.AsyncClient, url: str, task_id: str, stop: asyncio.Event,
                       stats: OldStats) -> None:
    cursor = 0
    while True:
        try:
            page = await _rpc(http, url, TRAJECTORY_READ, {"taskId": task_id, "after": cursor})
        except Exception:
            stats.failed_reads += 1
            if stop.is_set():
                stats.failed_after_stop += 1
            await asyncio.sleep(POLL)  # retry: the agent may come back
            continue
        stats.events += len(page.get("events", []))
        cursor = page.get("next", cursor)
        if stop.is_set() and not page.get("hasMore"):
            return  # drained
        try:  # noqa: SIM105 - the pattern as it was written
            await asyncio.wait_for(stop.wait(), POLL)
        except asyncio.TimeoutError:  # noqa: UP041
            pass


async def old_step(http: httpx.AsyncClient, url: str, text: str, ending: str, stats: OldStats,
                   started: asyncio.Event) -> None:
    """One turn with a follower; ends as ``ending`` ("cancelled" comes from outside)."""
    stop = asyncio.Event()
    follower: asyncio.Task[None] | None = None
    try:
        msg = {"messageId": f"old-{time.monotonic_ns()}", "role": "ROLE_USER",
               "parts": [{"text": text}]}
        result = await _rpc(http, url, "SendMessage",
                            {"message": msg, "configuration": {"returnImmediately": True}})
        task_id = result["task"]["id"]
        stats.task_id = task_id
        follower = asyncio.create_task(old_follower(http, url, task_id, stop, stats))
        started.set()
        while True:  # the turn: wait for the task's end
            task = await _rpc(http, url, "GetTask", {"id": task_id})
            if task["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED",
                                           "TASK_STATE_CANCELED"):
                break
            await asyncio.sleep(0.05)
        stats.turn_end = time.monotonic()
        if ending == "raises":
            raise RuntimeError("the body failed")
    finally:
        if stats.t0 is None:  # (the harness's clock: when the step started to end)
            stats.t0 = time.monotonic()
            stats.turn_end = stats.turn_end or stats.t0
        if stats.told is not None:
            stats.told.set()
        started.set()
        stop.set()
        if follower is not None:
            follower.cancel()
            await asyncio.wait([follower])
