"""End to end over hypercorn: send, stream, get, on both backends and both dialects."""

from __future__ import annotations

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent

from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio


async def test_blocking_send_completes_with_reply() -> None:
    app = A2AApp(demo_agent)
    async with served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {"message": text_message("hello")})
        task = body["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["status"]["message"]["parts"][0]["text"] == "You said: hello"
        got = await rpc(client, url, "GetTask", {"id": task["id"]})
        assert got["result"]["id"] == task["id"]
        parts = got["result"]["artifacts"][0]["parts"]
        assert "".join(p["text"] for p in parts) == "You said: hello"


async def test_v03_stream_ends_with_final_status() -> None:
    app = A2AApp(demo_agent)
    async with served(app) as url, httpx.AsyncClient() as client:
        req = {"jsonrpc": "2.0", "id": "s", "method": "message/stream",
               "params": {"message": text_message("hi", v1=False)}}
        async with client.stream("POST", url, json=req) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = [e async for e in sse_events(resp)]
        ids = [i for i, _ in events]
        assert ids == sorted(ids) and ids[0] == 0
        kinds = [e["result"]["kind"] for _, e in events]
        assert kinds[0] == "task" and kinds[-1] == "status-update"
        assert events[-1][1]["result"]["status"]["state"] == "completed"
        assert events[-1][1]["result"]["final"] is True
