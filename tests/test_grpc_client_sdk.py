"""Our client over gRPC against the official a2a-sdk's ``grpc.aio`` server (a subprocess,
tests/sdk_grpc_agent.py) whose card offers gRPC only: send, stream, get, cancel, subscribe,
errors mapped to our classes (TaskNotFound, TaskNotCancelable), a Step and the CLI; both
backends on our side."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from scoped_a2a import A2AClient, MemorySink, Step
from scoped_a2a.protocol.errors import TaskNotCancelable, TaskNotFound
from scoped_a2a.protocol.types import Message, Task, TaskState

from .helpers import free_port

pytestmark = pytest.mark.anyio
SCRIPT = Path(__file__).with_name("sdk_grpc_agent.py")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sdk_grpc_agent() -> Iterator[str]:
    """The base URL (its card) of an a2a-sdk gRPC server."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--port", str(port)],
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + ".well-known/agent-card.json").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.communicate()[1][-3000:]
                raise RuntimeError(f"the a2a-sdk gRPC server did not start:\n{err}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _text(task: Task) -> str:
    return "".join(p.text or "" for a in task.artifacts or [] for p in a.parts)


async def test_calls_against_the_sdk_grpc_server(sdk_grpc_agent: str) -> None:
    async with A2AClient(sdk_grpc_agent) as client:
        assert await client.binding() == "grpc"  # the card offers nothing else
        task = await client.send("hello")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED, task
        assert _text(task) == "echo: hello"
        reply = await client.send("msg hi")
        assert isinstance(reply, Message) and reply.text == "echo: msg hi", reply
        async with client.stream("slow") as events:
            seen = [e async for e in events]
        kinds = [e.kind for e in seen]
        assert kinds[0] == "task" and kinds.count("artifactUpdate") == 3, kinds
        assert seen[-1].event.status.state is TaskState.COMPLETED  # type: ignore[union-attr]
        got = await client.get_task(task.id)
        assert got.id == task.id and got.status.state is TaskState.COMPLETED
        with pytest.raises(TaskNotFound):
            await client.get_task("no-such-task")
        with pytest.raises(TaskNotCancelable):
            await client.cancel(task.id)
        # A long task: subscribe, then cancel it while subscribed.
        long = await client.send("long", return_immediately=True)
        assert isinstance(long, Task)
        with anyio.fail_after(15):
            async with client.subscribe(long.id) as events:
                first = await events.__anext__()
                assert first.kind in ("task", "statusUpdate", "artifactUpdate"), first
                canceled = await client.cancel(long.id)
                assert canceled.status.state is TaskState.CANCELED, canceled
                rest = [e async for e in events]
        assert rest == [] or rest[-1].kind == "statusUpdate", [e.kind for e in rest]
        assert (await client.get_task(long.id)).status.state is TaskState.CANCELED


async def test_a_step_against_the_sdk_grpc_server(sdk_grpc_agent: str) -> None:
    sink = MemorySink()
    async with A2AClient(sdk_grpc_agent) as client, Step(client, sink=sink) as step:
        task = await step.turn("slow")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED, task
        with anyio.fail_after(5):
            follower = step.turns[0].follower
            if follower is not None:
                await follower.done.wait()
    kinds = [e.kind for e in sink.turns["0001"].events]
    assert kinds.count("artifactUpdate") >= 1, kinds


async def test_the_cli_against_the_sdk_grpc_server(sdk_grpc_agent: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-m", "scoped_a2a", "send", sdk_grpc_agent, "from the cli", "--json"],
            check=False, env=env)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "echo: from the cli" in done.stdout.decode(), done.stdout.decode()[-2000:]


async def test_multi_turn_and_a_cancelled_step_over_grpc(sdk_grpc_agent: str) -> None:
    """Over gRPC as over JSON-RPC: a continued task's stream begins with a status update and is
    taken; a step given up on mid-turn cancels the SDK's executor within 1 s (CancelTask)."""
    from .test_abandon_peers import wait_cancelled

    async with A2AClient(sdk_grpc_agent) as client:
        async with Step(client) as step:
            first = await step.turn("ask me")
            assert isinstance(first, Task) and first.status.state is TaskState.INPUT_REQUIRED
            second = await step.turn("slow answer")
            assert isinstance(second, Task) and second.status.state is TaskState.COMPLETED
            assert second.id == first.id
        async with Step(client) as step:
            deadline = time.time() + 1.0
            with anyio.move_on_after(1.0):
                await step.turn("marathon")
        turn = step.turns[0]
        assert turn.abandoned is not None and turn.abandoned.outcome == "canceled", turn
        assert turn.task_id is not None
        entry = await wait_cancelled(sdk_grpc_agent, turn.task_id, within=1.0)
        assert 0 < entry["cancelled"] - deadline < 1.0, entry
