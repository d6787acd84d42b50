"""Small helpers of the Redis tests: reading a task's log and waiting for task states."""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

import anyio

from scoped_a2a.protocol.trajectory import TrajectoryEvent
from scoped_a2a.protocol.types import Task, TaskStatusUpdateEvent
from scoped_a2a.store.redis import RedisTaskStore


async def log_of(store: RedisTaskStore, task_id: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The task's ``start`` trajectory events and the states of its status updates."""
    page = await store.read(task_id, 0, max_events=10_000, max_bytes=1 << 30)
    starts = [e.event.data for e in page.entries
              if isinstance(e.event, TrajectoryEvent) and e.event.data.get("type") == "start"]
    states = [e.event.status.state.name for e in page.entries
              if isinstance(e.event, TaskStatusUpdateEvent)]
    return starts, states


async def wait_until_ended(
    store: RedisTaskStore, task_ids: list[str], timeout: float
) -> list[Task]:
    """Poll until every task is terminal (fails after ``timeout`` seconds)."""
    pending = list(task_ids)
    ended: dict[str, Task] = {}
    with anyio.fail_after(timeout):
        while pending:
            still = []
            for task_id in pending:
                task, _ = await store.get(task_id)
                if task.status.state.terminal:
                    ended[task_id] = task
                else:
                    still.append(task_id)
            pending = still
            if pending:
                await anyio.sleep(0.1)
    return [ended[t] for t in task_ids]


async def wait_for_start(store: RedisTaskStore, task_id: str, timeout: float = 30.0
                         ) -> dict[str, Any]:
    """The first ``start`` event of the task's run, once it is logged."""
    with anyio.fail_after(timeout):
        while True:
            starts, _ = await log_of(store, task_id)
            if starts:
                return starts[0]
            await anyio.sleep(0.05)


async def post_json(url: str, payload: dict[str, Any], *, hang_up_after_first_event: bool
                    ) -> dict[str, Any]:
    """One JSON-RPC POST over a fresh connection, written by hand to keep the load generator
    cheap (httpx costs more CPU per request than the servers do, on a 2-core machine).

    Returns the JSON-RPC response, or with ``hang_up_after_first_event`` the first SSE event's
    data, after which the connection is closed mid-stream: the caller hangs up.
    """
    parts = urllib.parse.urlsplit(url)
    body = json.dumps(payload).encode()
    head = (f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nA2A-Version: 1.0\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80)
    async with stream:
        await stream.send(head + body)
        data = b""
        while True:
            data += await stream.receive()  # EndOfStream here means a truncated answer
            headers, _, rest = data.partition(b"\r\n\r\n")
            if not _:
                continue
            assert headers.startswith(b"HTTP/1.1 200"), headers
            if hang_up_after_first_event:
                m = re.search(rb"\ndata: (\{.*\})\r?\n", rest)
                if m:
                    event: dict[str, Any] = json.loads(m.group(1))
                    return event  # leaving the block closes the connection: a hang-up
                continue
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", headers)
            assert length is not None, headers
            if len(rest) >= int(length.group(1)):
                answer: dict[str, Any] = json.loads(rest)
                return answer
