"""``historyLength`` returns at most that many of the most recent messages, never wraps around
(the conformance kit's 1.0-dev branch found 9 on a history of 8 returning 1 message)."""

from __future__ import annotations

import httpx
import pytest

from scoped_a2a import A2AApp, RunContext

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


async def asks_forever(ctx: RunContext) -> str:
    while True:
        if await ctx.ask("more?") == "stop":
            return "done"


async def test_history_length_past_the_history_returns_all_of_it_in_order() -> None:
    async with served(A2AApp(asks_forever)) as url, httpx.AsyncClient() as c:
        first = (await rpc(c, url, "SendMessage", {"message": text_message("m0")}))["result"]
        task_id, context_id = first["task"]["id"], first["task"]["contextId"]
        for i in range(1, 4):
            await rpc(c, url, "SendMessage", {"message": text_message(
                f"m{i}", taskId=task_id, contextId=context_id)})
        full = (await rpc(c, url, "GetTask", {"id": task_id}))["result"]["history"]
        assert len(full) == 8  # four of ours, four questions
        for length in (1, 3, 8, 9, 10, 16, 1000):
            got = (await rpc(c, url, "GetTask", {"id": task_id, "historyLength": length}))
            history = got["result"].get("history", [])
            assert history == full[-length:], length
        listed = await rpc(c, url, "ListTasks", {"historyLength": 9})
        assert listed["result"]["tasks"][0]["history"] == full
        zero = await rpc(c, url, "GetTask", {"id": task_id, "historyLength": 0})
        assert "history" not in zero["result"]
