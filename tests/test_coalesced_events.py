"""A stream reader that finds several new events writes them together, each still whole.

A reader wakes on the store's signal and reads everything appended since its cursor; the events
it finds go out in as few writes as fit in one slice (``SSEWriter.results``), which is what keeps
a large fan-out from falling behind. Together or not, every event must arrive exactly once, in
log order, each with its own ``id:`` (the log position a reconnecting client resumes from).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext

from .helpers import served, sse_events, text_message

pytestmark = pytest.mark.anyio

BURST = 60


async def bursty(ctx: RunContext) -> str:
    # No checkpoint between these appends: a reader wakes once and finds them all.
    for i in range(BURST):
        await ctx.working(f"step {i}")
    await ctx.artifact("x" * 20_000, name="big")  # larger than one slice
    for i in range(5):
        await ctx.working(f"after {i}")
    return "done"


def _check(events: list[tuple[int | None, dict[str, Any]]], *, rest: bool) -> None:
    ids = [i for i, _ in events]
    results = [e if rest else e["result"] for _, e in events]
    assert "task" in results[0]
    # The snapshot is position 0 (the task as created); then every logged event, in order.
    assert ids == list(range(0, len(ids))), ids
    texts = [r["statusUpdate"]["status"]["message"]["parts"][0]["text"]
             for r in results[1:] if "statusUpdate" in r and r["statusUpdate"]["status"].get(
                 "message") and r["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"]
    assert texts == [f"step {i}" for i in range(BURST)] + [f"after {i}" for i in range(5)]
    artifacts = [r for r in results if "artifactUpdate" in r]
    assert len(artifacts) == 1
    assert artifacts[0]["artifactUpdate"]["artifact"]["parts"][0]["text"] == "x" * 20_000
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("binding", ["JSON-RPC", "HTTP+JSON"])
async def test_a_burst_arrives_whole_in_order_once_over_http(binding: str) -> None:
    async with served(A2AApp(bursty)) as url, httpx.AsyncClient(timeout=10) as client:
        message = text_message("go")
        if binding == "JSON-RPC":
            request = client.stream("POST", url, headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
                "params": {"message": message}})
        else:
            request = client.stream("POST", url + "message:stream",
                                    headers={"A2A-Version": "1.0"}, json={"message": message})
        async with request as response:
            assert response.status_code == 200
            events = [e async for e in sse_events(response)]
    _check(events, rest=binding == "HTTP+JSON")


async def test_a_burst_takes_fewer_writes_than_events() -> None:
    """In-process, counting the app's body writes (the server stack is not what is judged)."""
    app = A2AApp(bursty)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                       "params": {"message": text_message("go")}}).encode()
    writes: list[bytes] = []
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    stay = anyio.Event()

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await stay.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            writes.append(message["body"])

    scope = {"type": "http", "method": "POST", "path": "/", "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"a2a-version", b"1.0")]}
    async with app.running():
        await app(scope, receive, send)
    stream = b"".join(writes).decode()
    events = stream.count("\n\n")
    assert events == 1 + 1 + BURST + 1 + 5 + 1  # snapshot, submitted->working, ..., completed
    # Every write holds whole events only (a big one is sliced, its pieces end mid-event).
    small = [w for w in writes if len(w) < 8 << 10]
    assert all(w.endswith(b"\n\n") for w in small)
    assert len(writes) < events / 4, (len(writes), events)


async def test_an_agent_text_that_is_not_a_str_fails_the_run_and_keeps_the_task_readable() -> None:
    async def wrong(ctx: RunContext) -> str:
        await ctx.artifact([{"text": "a list"}])  # type: ignore[arg-type]
        return "unreachable"

    async with served(A2AApp(wrong)) as url, httpx.AsyncClient(timeout=10) as client:
        r = await client.post(url, headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": text_message("go")}})
        task = r.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert "TypeError" in task["status"]["message"]["parts"][0]["text"]
        again = await client.post(url, headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}})
        assert again.json()["result"]["status"]["state"] == "TASK_STATE_FAILED"
