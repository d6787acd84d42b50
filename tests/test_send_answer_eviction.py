"""A blocking send's answer under eviction pressure, real HTTP, both backends.

The end watch of a blocking send (server/end_lost.py) is a task group, and leaving it is a
checkpoint: read after it, the send's own task could be evicted meanwhile by the memory store's
caps, and the caller got -32001 for a task that had completed (seen with 100 concurrent 3.2 MiB
tasks and ``--max-ended-bytes 32MiB``). The final task is read before the watch ends now.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.store.memory import MemoryTaskStore

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


async def quick(ctx: RunContext) -> str:
    await anyio.sleep(0.01)
    return "done " + ctx.text


async def test_every_concurrent_blocking_send_gets_its_task_though_one_task_is_kept() -> None:
    store = MemoryTaskStore(max_ended_tasks=1)
    answers: list[dict[str, object]] = []
    async with served(A2AApp(quick, store=store)) as url, httpx.AsyncClient(
            timeout=30, limits=httpx.Limits(max_connections=200)) as client:

        async def send(i: int) -> None:
            answers.append(await rpc(client, url, "SendMessage",
                                     {"message": text_message(f"m{i}")}))

        for _ in range(2):
            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(send, i)
    errors = [a for a in answers if "error" in a]
    assert not errors, (len(errors), errors[:2])
    assert len(answers) == 200
