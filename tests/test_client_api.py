"""A2AClient against this project's server over real HTTP: every method, both dialects, errors."""

from __future__ import annotations

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, A2AClient, MemoryTaskStore, follow_trajectory
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.client import AgentHTTPError, AgentUnreachable, MemorySink
from scoped_a2a.client.card import AgentCard, AgentInterface, select_interface
from scoped_a2a.client.sse import SSEDecoder
from scoped_a2a.protocol.errors import (
    A2AError,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
    VersionNotSupported,
)
from scoped_a2a.protocol.types import Message, Task, TaskState
from scoped_a2a.testing import faulty_agent

from .helpers import served

pytestmark = pytest.mark.anyio


def _reply(task: Task | Message) -> str:
    assert isinstance(task, Task)
    return "".join(p.text or "" for a in task.artifacts or [] for p in a.parts)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_every_method_in_both_versions(version: str) -> None:
    seen: list[httpx.Request] = []

    async def log(request: httpx.Request) -> None:
        seen.append(request)

    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient(
        event_hooks={"request": [log]}
    ) as http:
        client = A2AClient(url, http=http, version=version)
        task = await client.send("hello")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
        assert _reply(task) == "You said: hello"
        assert task.status.message is not None and task.status.message.text == "You said: hello"

        async with client.stream("hi there") as events:
            items = [e async for e in events]
        assert items[0].kind == "task" and items[0].position == 0
        positions = [e.position for e in items]
        assert positions == sorted(positions)
        assert items[-1].kind == "statusUpdate"
        assert items[-1].event.status.state is TaskState.COMPLETED  # type: ignore[union-attr]

        got = await client.get_task(task.id, history_length=1)
        assert got.id == task.id and got.history is not None and len(got.history) == 1

        running = await client.send("slow 5", return_immediately=True)
        assert isinstance(running, Task) and not running.status.state.terminal
        # subscribe, resuming from a position: the first events are replayed from the log
        async with client.subscribe(running.id, last_event_id=0) as events:
            first = await events.__anext__()
        assert first.kind == "statusUpdate" and first.position == 1
        canceled = await client.cancel(running.id)
        assert canceled.status.state is TaskState.CANCELED
        with pytest.raises(TaskNotCancelable) as not_cancelable:
            await client.cancel(running.id)
        assert not_cancelable.value.code == -32002

        if version == "1.0":
            listed = await client.list_tasks(page_size=10)
            assert {t.id for t in listed.tasks} >= {task.id, running.id}
        else:
            with pytest.raises(UnsupportedOperation):
                await client.list_tasks()
    rpc = [r for r in seen if r.method == "POST"]
    assert {r.headers["A2A-Version"] for r in rpc} == {version}
    sent = {r.read().split(b'"method":')[1].split(b",")[0] for r in rpc}
    if version == "0.3":
        assert sent == {b'"message/send"', b'"message/stream"', b'"tasks/get"',
                        b'"tasks/resubscribe"', b'"tasks/cancel"'}


async def test_a_card_offering_only_03_is_spoken_in_03() -> None:
    async with served(A2AApp(demo_agent)) as url:
        card = AgentCard(name="old", supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3")])
        async with A2AClient(url, card=card) as client:
            assert await client.version() == "0.3"
            task = await client.send("hello")
            assert _reply(task) == "You said: hello"


def test_interface_choice_follows_the_card() -> None:
    def card(*versions: str | None, binding: str = "JSONRPC") -> AgentCard:
        return AgentCard(supported_interfaces=[
            AgentInterface(url=f"u{v}", protocol_binding=binding, protocol_version=v)
            for v in versions])

    assert select_interface(card("0.3", "1.0")) == ("u1.0", "1.0")
    assert select_interface(card("0.3")) == ("u0.3", "0.3")
    assert select_interface(card(None)) == ("uNone", "1.0")
    assert select_interface(AgentCard(url="legacy")) == ("legacy", "0.3")
    with pytest.raises(VersionNotSupported):
        select_interface(card("0.2.5"))
    with pytest.raises(VersionNotSupported):
        select_interface(card("1.0", binding="GRPC"))


async def test_transport_failures_are_typed() -> None:
    with anyio.fail_after(10):
        async with served(A2AApp(demo_agent)) as url:
            pass  # the server is gone now: its port refuses connections
        async with A2AClient(url) as client:
            with pytest.raises(AgentUnreachable):
                await client.card()
        async with faulty_agent(demo_agent, "500", methods={"GetTask"}) as (
            proxy_url, _proxy, _app
        ), A2AClient(proxy_url) as client:
            with pytest.raises(AgentHTTPError) as http_error:
                await client.get_task("x")
            assert http_error.value.status_code == 500
            with pytest.raises(TaskNotFound) as not_found:
                await client.cancel("x")
            assert not_found.value.code == -32001 and isinstance(not_found.value, A2AError)


async def test_trajectory_read_pages_and_evicted_tasks() -> None:
    app = A2AApp(demo_agent, store=MemoryTaskStore(max_ended_tasks=1))
    async with served(app) as url, A2AClient(url) as client:
        assert await client.offers_trajectory()
        task = await client.send("one two three")
        assert isinstance(task, Task)
        pages, after = [], 0
        while True:
            page = await client.read_trajectory(task.id, after, max_events=2)
            pages.append(page)
            assert page.after == after and len(page.events) <= 2
            after = page.next
            if not page.has_more:
                break
        positions = [e.position for p in pages for e in p.events]
        assert positions == list(range(1, positions[-1] + 1))
        assert {e.kind for p in pages for e in p.events} >= {"statusUpdate", "trajectory"}
        one = await client.read_trajectory(task.id, 0, max_bytes=1)
        assert len(one.events) == 1  # the first event always comes, whatever its size
        # another task ends: the first is evicted, and the agent answers 404-style
        await client.send("again")
        with pytest.raises(TaskNotFound):
            await client.read_trajectory(task.id, 0)
        sink = MemorySink().turn("x")
        follower = await follow_trajectory(client, task.id, sink)
        assert follower.outcome == "task-gone" and follower.reads == 1 and not sink.pages


def test_sse_decoder_handles_split_frames_and_line_endings() -> None:
    d = SSEDecoder()
    assert d.feed(b": keep-alive\r\n\r\nid: 3\r\nda") == []
    assert d.feed(b"ta: {\"a\":1}\r") == []
    events = d.feed(b"\n\r\nevent: error\ndata: x\ndata: y\n\nid: 4\rdata: z\r\r")
    assert [(e.id, e.event, e.data) for e in events] == [
        ("3", "message", '{"a":1}'), (None, "error", "x\ny")]
    # A CR at the end of a chunk may be half of a CRLF: the event completes with the next chunk.
    assert [(e.id, e.data) for e in d.feed(b"\n")] == [("4", "z")]
    assert d.last_event_id == "4"


async def test_step_polls_an_agent_that_does_not_stream() -> None:
    from scoped_a2a import Step

    app = A2AApp(demo_agent, card={"capabilities": {"streaming": False}})
    async with served(app) as url, A2AClient(url) as client:
        sink = MemorySink()
        async with Step(client, sink=sink, poll_interval=0.02) as step:
            task = await step.turn("no stream")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
        assert _reply(task) == "You said: no stream"
        follower = step.turns[0].follower
        assert follower is not None and follower.outcome in ("ended", "drained")
        assert sink.turns["0001"].end == {"state": "TASK_STATE_COMPLETED",
                                          "next": follower.cursor}
