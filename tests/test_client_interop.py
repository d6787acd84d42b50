"""This client against the official a2a-sdk server (run under uvicorn in a subprocess).

The SDK server speaks 1.0 and 0.3 on one URL; one instance advertises both (the client picks
1.0), another only 0.3 (the client picks 0.3). On both backends: send, stream, get, cancel,
subscribe, a remote error, and a step whose follower subscribes (the SDK has no trajectory
extension).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from scoped_a2a import A2AClient, MemorySink, Step
from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.types import Message, Task, TaskState, TaskStatusUpdateEvent

from .client_helpers import assert_no_followers_left
from .helpers import free_port

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).with_name("sdk_agent.py")


@pytest.fixture(scope="module")
def sdk_agents() -> Iterator[dict[str, str]]:
    """Two SDK servers: {"1.0": url of one offering 1.0 and 0.3, "0.3": url of a 0.3-only}."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        for version, extra in (("1.0", []), ("0.3", ["--only-v03-card"])):
            port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, str(SCRIPT), "--port", str(port), *extra]))
            urls[version] = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 30
        for url in urls.values():
            while True:
                try:
                    if httpx.get(url + ".well-known/agent-card.json").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the a2a-sdk server did not start")
                time.sleep(0.1)
        yield urls
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _text(task: Task) -> str:
    return "".join(p.text or "" for a in task.artifacts or [] for p in a.parts)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_calls_against_the_sdk_server(sdk_agents: dict[str, str], version: str) -> None:
    async with A2AClient(sdk_agents[version]) as client:
        assert await client.version() == version  # chosen from the card
        # send (blocking), and a direct message reply
        task = await client.send("hello")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
        assert _text(task) == "echo: hello"
        reply = await client.send("msg hi")
        assert isinstance(reply, Message) and reply.text == "echo: msg hi"
        # stream
        async with client.stream("slow") as events:
            kinds = [(e.kind, e.event) async for e in events]
        assert [k for k, _ in kinds] == ["task", "statusUpdate", "artifactUpdate",
                                         "artifactUpdate", "artifactUpdate", "statusUpdate"]
        last = kinds[-1][1]
        assert isinstance(last, TaskStatusUpdateEvent)
        assert last.status.state is TaskState.COMPLETED
        # get
        streamed_id = kinds[0][1].id  # type: ignore[union-attr]
        got = await client.get_task(streamed_id, history_length=1)
        assert got.status.state is TaskState.COMPLETED and _text(got) == "chunk0 chunk1 chunk2 "
        # subscribe to a running task, then cancel it
        running = await client.send("long", return_immediately=True)
        assert isinstance(running, Task)
        async with client.subscribe(running.id) as events:
            first = await events.__anext__()
            assert first.kind == "task" and first.event.id == running.id  # type: ignore[union-attr]
            second = await events.__anext__()
            assert second.kind in ("statusUpdate", "artifactUpdate")
        canceled = await client.cancel(running.id)
        assert canceled.status.state is TaskState.CANCELED
        # a remote error carries its JSON-RPC code
        with pytest.raises(TaskNotFound) as err:
            await client.get_task("no-such-task")
        assert err.value.code == -32001


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_step_follows_sdk_task_by_subscription(
    sdk_agents: dict[str, str], version: str
) -> None:
    sink = MemorySink()
    async with A2AClient(sdk_agents[version]) as client, Step(client, sink=sink) as step:
        task = await step.turn("slow")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
        with anyio.fail_after(5):
            assert step.turns[0].follower is not None
            await step.turns[0].follower.done.wait()
    follower = step.turns[0].follower
    assert follower.mode == "subscribe" and follower.outcome == "ended"
    turn = sink.turns["0001"]
    assert turn.end is not None and turn.end["state"] == "TASK_STATE_COMPLETED"
    kinds = [e.kind for e in turn.events]
    assert kinds[0] == "task" and kinds[-1] == "statusUpdate"
    assert kinds.count("artifactUpdate") >= 1
    assert_no_followers_left()
