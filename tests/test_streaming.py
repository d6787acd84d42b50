"""Streams and the live trajectory: positions, resume, fan-out, keep-alives, the extension."""

from __future__ import annotations

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.trajectory import TRAJECTORY_EXTENSION_URI

from .agents import Probe
from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio


def stream_req(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}


async def collect(client: httpx.AsyncClient, url: str, req: dict,
                  headers: dict | None = None) -> list[tuple[int | None, dict]]:
    async with client.stream("POST", url, json=req, headers=headers or {}) as resp:
        assert resp.status_code == 200
        return [e async for e in sse_events(resp)]


async def test_stream_ids_are_positions_and_dropping_the_only_stream_cancels_the_run() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=2, steps=20))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        req = stream_req("SendStreamingMessage", {"message": text_message("go")})
        got: list[tuple[int | None, dict]] = []
        async with client.stream("POST", url, json=req) as resp:
            async for event in sse_events(resp):
                got.append(event)
                if len(got) == 4:
                    break  # the client drops the stream mid-run
        assert [i for i, _ in got] == [0, 1, 2, 3]
        task_id = got[0][1]["result"]["task"]["id"]
        with anyio.fail_after(5):
            while task_id not in probe.cancelled:
                await anyio.sleep(0.01)
        task = (await rpc(client, url, "GetTask", {"id": task_id}))["result"]
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert app.runner.active == 0


async def test_subscribe_with_last_event_id_resumes_without_gaps_or_repeats() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.6, steps=12))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("go"), "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]
        first: list[tuple[int | None, dict]] = []
        async with client.stream("POST", url, json=stream_req("SubscribeToTask",
                                                               {"id": task_id})) as resp:
            async for event in sse_events(resp):
                first.append(event)
                if len(first) == 4:
                    break
        assert "task" in first[0][1]["result"]
        last_seen = first[-1][0]
        assert last_seen is not None
        rest = await collect(client, url, stream_req("SubscribeToTask", {"id": task_id}),
                             headers={"Last-Event-ID": str(last_seen)})
        ids = [i for i, _ in first[1:]] + [i for i, _ in rest]
        assert all(i is not None for i in ids)
        assert ids == list(range(ids[0], ids[0] + len(ids))), "no gap, no repeat"
        assert rest[-1][1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_many_subscribers_see_the_same_events_in_the_same_order() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.5, steps=10))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("fan out"), "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]
        results: list[list[int | None]] = []

        async def subscriber() -> None:
            events = await collect(client, url,
                                   stream_req("SubscribeToTask", {"id": task_id}),
                                   headers={"Last-Event-ID": "0"})
            results.append([i for i, _ in events])

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(subscriber)
        assert len(results) == 8
        assert all(r == results[0] for r in results)
        assert results[0][0] == 1 and len(results[0]) >= 10


async def test_a_stalled_subscriber_does_not_stall_the_run_or_others() -> None:
    """A client that stops reading lags on its own cursor; the run and others go on."""
    probe = Probe()
    big = "x" * 20_000

    async def chatty(ctx: RunContext) -> str:
        for i in range(100):
            await ctx.artifact(big, name=f"a{i}")
        return "done"

    app = A2AApp(chatty, stream_write_timeout=1.0)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        del probe
        sent = await rpc(client, url, "SendMessage", {
            "message": text_message("go"), "configuration": {"returnImmediately": True}})
        task_id = sent["result"]["task"]["id"]
        # One subscriber reads a single event, then stalls with the connection open.
        stalled = anyio.Event()

        async def staller() -> None:
            async with client.stream("POST", url, json=stream_req(
                    "SubscribeToTask", {"id": task_id}), headers={"Last-Event-ID": "0"}) as resp:
                async for _ in resp.aiter_raw(1024):
                    stalled.set()
                    await anyio.sleep(30)

        async with anyio.create_task_group() as tg:
            tg.start_soon(staller)
            await stalled.wait()
            with anyio.fail_after(10):
                events = await collect(client, url, stream_req(
                    "SubscribeToTask", {"id": task_id}), headers={"Last-Event-ID": "0"})
            assert events[-1][1]["result"]["statusUpdate"]["status"]["state"] == (
                "TASK_STATE_COMPLETED")
            tg.cancel_scope.cancel()


async def test_idle_streams_get_keep_alive_comments() -> None:
    gate = None

    async def waits(ctx: RunContext) -> str:
        await anyio.sleep(0.5)
        return "ok"

    app = A2AApp(waits, keepalive=0.1)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        del gate
        req = stream_req("SendStreamingMessage", {"message": text_message("x")})
        async with client.stream("POST", url, json=req) as resp:
            lines = [line async for line in resp.aiter_lines()]
        assert sum(line == ": keep-alive" for line in lines) >= 2


async def test_trajectory_events_stream_only_to_clients_that_activate_the_extension() -> None:
    async def thinker(ctx: RunContext) -> str:
        await ctx.trajectory({"type": "tool_call", "tool": "search"})
        return "ok"

    app = A2AApp(thinker)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        req = stream_req("SendStreamingMessage", {"message": text_message("x")})
        plain = await collect(client, url, req)
        assert not any("trajectory" in e["result"] for _, e in plain)
        # A message of its own: the same messageId again would be a resend of the first.
        req = stream_req("SendStreamingMessage", {"message": text_message("x")})
        with_ext = await collect(client, url, req,
                                 headers={"A2A-Extensions": TRAJECTORY_EXTENSION_URI})
        traj = [e["result"]["trajectory"] for _, e in with_ext if "trajectory" in e["result"]]
        assert traj and traj[0]["data"] == {"type": "tool_call", "tool": "search"}


async def test_trajectory_read_pages_by_cursor_with_limits() -> None:
    async def thinker(ctx: RunContext) -> str:
        for i in range(10):
            await ctx.trajectory({"i": i, "pad": "y" * 300})
        return "ok"

    app = A2AApp(thinker)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        sent = await rpc(client, url, "SendMessage", {"message": text_message("x")})
        task_id = sent["result"]["task"]["id"]
        after, seen, pages = 0, [], 0
        while True:
            page = (await rpc(client, url, "scoped_a2a/trajectory/read",
                              {"taskId": task_id, "after": after, "maxBytes": 700}))["result"]
            pages += 1
            assert page["events"], "the first event is always returned"
            seen += [e["position"] for e in page["events"]]
            after = page["next"]
            if not page["hasMore"]:
                break
        assert page["state"] == "TASK_STATE_COMPLETED"
        assert seen == list(range(1, len(seen) + 1))
        assert pages > 3  # the byte limit split the log
        one = (await rpc(client, url, "scoped_a2a/trajectory/read",
                         {"taskId": task_id, "after": 0, "maxBytes": 1}))["result"]
        assert len(one["events"]) == 1
        gone = await rpc(client, url, "scoped_a2a/trajectory/read", {"taskId": "nope"})
        assert gone["error"]["code"] == -32001
