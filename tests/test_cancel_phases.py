"""Cancellation at each phase of a request leaves nothing behind (counted, not assumed).

Like httpcore's test_cancellations: a client that stalls or drops at each phase (while the body is
being sent, while the run works, while the stream is being written), then an assertion that no
request, run, or task of the server is left over.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.push import PushSettings

from .agents import Probe
from .helpers import served, text_message
from .push_receiver import Receiver, receiving

pytestmark = pytest.mark.anyio


def tasks(app: A2AApp) -> int:
    """Running tasks, less the nursery's idle run workers (kept for the next runs, at most
    runtime.workers.MAX_IDLE: not left behind by a request)."""
    return len(anyio.get_running_tasks()) - app.runner.idle_workers


async def settled(app: A2AApp, baseline_tasks: int, timeout: float = 5.0) -> None:
    """Wait until the app has no open request or run and the task count is back to baseline."""
    with anyio.fail_after(timeout):
        while app.open_requests or app.runner.active or tasks(app) > baseline_tasks:
            await anyio.sleep(0.01)


def body(text: str, method: str = "SendMessage", **params: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                       "params": {"message": text_message(text), **params}}).encode()


async def raw_request(
    url: str, payload: bytes, *, declared: int | None = None
) -> anyio.abc.SocketStream:
    parts = urlsplit(url)
    stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80)
    length = declared if declared is not None else len(payload)
    head = (f"POST / HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()
    await stream.send(head + payload)
    return stream


async def test_drop_while_sending_the_body() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=1))
    async with served(app) as url:
        await anyio.sleep(0.05)
        baseline = tasks(app)
        for _ in range(5):
            payload = body("never complete")
            stream = await raw_request(url, payload[:20], declared=len(payload))
            await anyio.sleep(0.02)
            await stream.aclose()
        await settled(app, baseline)
        assert len(app.store) == 0, "a half-sent request must not create a task"  # type: ignore[arg-type]
        assert not probe.started


async def test_drop_while_the_run_works() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=5, steps=50))
    async with served(app) as url:
        await anyio.sleep(0.05)
        baseline = tasks(app)
        for i in range(5):
            stream = await raw_request(url, body(f"run {i}"))
            await probe.wait_started(i + 1)
            await stream.aclose()
        await settled(app, baseline)
        assert len(probe.cancelled) == 5
        for task_id in probe.started:
            task, _ = await app.store.get(task_id)
            assert task.status.state.name == "CANCELED"


async def test_drop_while_streaming() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=5, steps=50))
    async with served(app) as url:
        await anyio.sleep(0.05)
        baseline = tasks(app)
        for i in range(5):
            stream = await raw_request(url, body(f"stream {i}", "SendStreamingMessage"))
            received = b""
            with anyio.fail_after(5):
                while received.count(b"\n\n") < 3:  # headers + two events
                    received += await stream.receive()
            assert b"text/event-stream" in received
            await stream.aclose()
        await settled(app, baseline)
        assert len(probe.cancelled) == 5


async def test_drop_while_a_subscriber_streams_leaves_the_detached_run_alone() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.6, steps=6))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        sent = (await client.post(url, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": text_message("bg"),
                       "configuration": {"returnImmediately": True}}})).json()
        task_id = sent["result"]["task"]["id"]
        await anyio.sleep(0.05)
        baseline = tasks(app)
        sub = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask",
                          "params": {"id": task_id}}).encode()
        stream = await raw_request(url, sub)
        with anyio.fail_after(5):
            received = await stream.receive()
        assert b"200" in received
        await stream.aclose()
        with anyio.fail_after(5):
            while task_id not in probe.finished:
                await anyio.sleep(0.01)
        await settled(app, baseline - 1)  # the detached run itself has ended too
        task, _ = await app.store.get(task_id)
        assert task.status.state.name == "COMPLETED"


async def test_drop_right_after_a_whole_detached_send_still_runs_it() -> None:
    """A detached send that arrived whole runs however soon its caller hangs up: even while
    the server is still checking its push URL (an await the hang-up used to cancel)."""
    probe = Probe()
    receiver = Receiver()
    app = A2AApp(probe.agent(seconds=0.05, steps=1),
                 policy=RunPolicy.from_rules(["evoai_crm_event"]),
                 push=PushSettings(allow_hosts=["127.0.0.1"], deliver="terminal"))
    async with receiving(receiver) as hook, served(app) as url:
        for i in range(5):
            stream = await raw_request(url, body(
                f"event {i}", metadata={"evoai_crm_event": "new_lead"},
                configuration={"taskPushNotificationConfig": {"url": hook, "id": "crm"}}))
            await stream.aclose()  # the CRM hangs up as soon as its request is out
        with anyio.fail_after(10):
            while len(probe.finished) < 5 or len(receiver.requests) < 5 or app.push.active:
                await anyio.sleep(0.01)
        assert len(app.store) == 5  # type: ignore[arg-type]
        for task_id in probe.finished:
            task, _ = await app.store.get(task_id)
            assert task.status.state.name == "COMPLETED"
        delivered = {r.json["task"]["id"] for r in receiver.requests}
        assert delivered == set(probe.finished)
        assert not probe.cancelled
