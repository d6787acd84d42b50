"""Stream edges: a malformed Last-Event-ID, keep-alives on streams that filter events out or
whose events meet a keep-alive deadline, and headers sent at once when a resumed stream has
nothing to send yet. Real hypercorn, both workers.
"""

from __future__ import annotations

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext

from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio


async def idle_agent(ctx: RunContext) -> str:
    """Says nothing for a long while (a task whose log stays at its end)."""
    await anyio.sleep(20)
    return "late"


async def chatty_agent(ctx: RunContext) -> str:
    """Only trajectory events (which a stream without the extension filters out), for 3 s."""
    for i in range(30):
        await ctx.trajectory({"type": "tick", "step": i})
        await anyio.sleep(0.1)
    return "done"


async def _start(client: httpx.AsyncClient, url: str) -> str:
    sent = await rpc(client, url, "SendMessage", {
        "message": text_message("go"), "configuration": {"returnImmediately": True}})
    task_id: str = sent["result"]["task"]["id"]
    return task_id


def _subscribe(task_id: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": task_id}}


@pytest.mark.parametrize("value", [
    b"\xb2",  # latin-1 for the superscript two: str.isdigit() says yes, int() says no
    b"1" * 5000,  # beyond int()'s digit limit
    b"-1",
    b"12 34",
])
async def test_a_malformed_last_event_id_is_invalid_params_naming_the_header(value: bytes) -> None:
    app = A2AApp(idle_agent)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        task_id = await _start(client, url)
        r = await client.post(url, json=_subscribe(task_id),
                              headers={"A2A-Version": "1.0", "Last-Event-ID": value})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["error"]["code"] == -32602
        assert "Last-Event-ID" in body["error"]["message"]
        await rpc(client, url, "CancelTask", {"id": task_id})


async def test_a_stream_that_filters_trajectory_events_out_still_gets_keep_alives() -> None:
    """Keep-alives follow the bytes written to this stream, not the events appended to the log:
    the agent appends a trajectory event every 0.1 s, which this stream (no extension) drops."""
    app = A2AApp(chatty_agent, keepalive=0.5)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
               "params": {"message": text_message("go")}}
        comments = 0
        events = 0
        async with client.stream("POST", url, json=req,
                                 headers={"A2A-Version": "1.0"}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith(":"):
                    comments += 1
                elif line.startswith("data:"):
                    events += 1
        assert events >= 2  # the task, ..., the final status
        # Three seconds without a written byte beyond the first events: about six keep-alives.
        assert comments >= 3, f"only {comments} keep-alives in 3 s of filtered-out events"


async def test_subscribe_resuming_at_the_end_of_the_log_sends_headers_at_once() -> None:
    app = A2AApp(idle_agent)  # default keep-alive (15 s): only the headers can come early
    async with served(app) as url, httpx.AsyncClient(timeout=30) as client:
        task_id = await _start(client, url)
        with anyio.fail_after(3):  # the next event is 20 s away
            async with client.stream("POST", url, json=_subscribe(task_id),
                                     headers={"A2A-Version": "1.0",
                                              "Last-Event-ID": "999"}) as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"] == "text/event-stream"
        await rpc(client, url, "CancelTask", {"id": task_id})


async def big_artifact_agent(ctx: RunContext) -> str:
    """One artifact of 300 KiB (an event far bigger than one write slice), then done."""
    await ctx.artifact("y" * (300 << 10), name="big")
    return "done"


@pytest.mark.parametrize("v1", [True, False])
async def test_big_events_arrive_whole_in_both_dialects(v1: bool) -> None:
    """A snapshot and an event bigger than a write slice are written in slices and arrive as
    one intact event each (1.0 splices the log's encoding; 0.3 re-encodes, shared)."""
    app = A2AApp(big_artifact_agent)
    big_text = "x" * (200 << 10)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        req = {"jsonrpc": "2.0", "id": "big", "params": {"message": text_message(big_text, v1=v1)},
               "method": "SendStreamingMessage" if v1 else "message/stream"}
        headers = {"A2A-Version": "1.0"} if v1 else {}
        got: list[tuple[int | None, dict]] = []
        async with client.stream("POST", url, json=req, headers=headers) as resp:
            got = [e async for e in sse_events(resp)]
    assert all(body["id"] == "big" and "result" in body for _, body in got)
    ids = [i for i, _ in got]
    assert ids == sorted(ids) and ids[0] == 0
    first = got[0][1]["result"]
    task = first["task"] if v1 else first
    assert task["history"][0]["parts"][0]["text"] == big_text
    texts = [p.get("text") for _, body in got
             for p in (body["result"].get("artifactUpdate", body["result"]).get("artifact")
                       or {}).get("parts", [])]
    assert "y" * (300 << 10) in texts


async def jittery_agent(ctx: RunContext) -> str:
    """Status updates about as far apart as the keep-alive interval, some just before it falls
    due and some just after (so wake-ups and keep-alive deadlines meet)."""
    for i in range(40):
        await ctx.working(f"step {i}")
        await anyio.sleep(0.02 + 0.002 * (i % 10))
    return "done"


async def test_events_meeting_a_keep_alive_deadline_arrive_once_each_in_order() -> None:
    """The keep-alive ends the stream's wait (sse.py: the write deadline doubles as the
    keep-alive's); an event that wakes the stream as it falls due is written after the keep-alive
    exactly once, on a sender's stream and on a subscriber's."""
    app = A2AApp(jittery_agent, keepalive=0.03)
    streams: dict[str, list[str]] = {"sent": [], "subscribed": []}

    async def read(client: httpx.AsyncClient, url: str, req: dict[str, object],
                   out: list[str]) -> None:
        async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith((":", "id:")):
                    out.append(line)

    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        task_id = await _start(client, url)
        send = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": text_message("go")}}
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, client, url, send, streams["sent"])
            tg.start_soon(read, client, url, _subscribe(task_id), streams["subscribed"])
    for name, lines in streams.items():
        ids = [int(line[3:]) for line in lines if line.startswith("id:")]
        assert ids and ids == list(range(ids[0], ids[0] + len(ids))), (name, ids)
        assert ids[-1] == 42, name  # submitted, working, 40 updates, completed
        assert any(line.startswith(":") for line in lines), name  # keep-alives fell due
    assert next(line for line in streams["sent"] if line.startswith("id:")) == "id: 0"
