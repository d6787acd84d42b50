"""The official a2a-sdk 1.3.0 client against our server, over real HTTP, in A2A 1.0 and 0.3.

Each test fetches our agent card with the SDK's resolver, keeps only the interface of the dialect
under test (the SDK then picks ``JsonRpcTransport`` for 1.0, ``CompatJsonRpcTransport`` for 0.3),
and records the JSON-RPC method names the SDK puts on the wire, so a test proves which dialect it
exercised, not only that some call worked.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory, create_client
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent

from .helpers import served

pytestmark = pytest.mark.anyio

V10_METHODS = {"send": "SendMessage", "stream": "SendStreamingMessage", "get": "GetTask",
               "cancel": "CancelTask", "subscribe": "SubscribeToTask", "list": "ListTasks"}
V03_METHODS = {"send": "message/send", "stream": "message/stream", "get": "tasks/get",
               "cancel": "tasks/cancel", "subscribe": "tasks/resubscribe"}


@pytest.fixture(params=["1.0", "0.3"])
def proto(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@dataclass
class Peer:
    """An SDK client pair (unary sends and streaming sends) plus what they sent."""

    unary: Client
    streaming: Client
    methods: list[str] = field(default_factory=list)

    def expect(self, proto: str, *names: str) -> list[str]:
        table = V10_METHODS if proto == "1.0" else V03_METHODS
        return [table[n] for n in names]


def _recorder(methods: list[str]) -> httpx.AsyncClient:
    async def record(request: httpx.Request) -> None:
        if request.method == "POST":
            methods.append(json.loads(request.content)["method"])

    return httpx.AsyncClient(event_hooks={"request": [record]}, timeout=10)


@asynccontextmanager
async def sdk_peer(url: str, proto: str) -> AsyncIterator[Peer]:
    """SDK clients built from our served card, forced to speak ``proto``."""
    async with httpx.AsyncClient() as h:
        card = await A2ACardResolver(h, url).get_agent_card()
    assert card.capabilities.streaming
    keep = [i for i in card.supported_interfaces
            if i.protocol_version == proto and i.protocol_binding == "JSONRPC"]
    assert len(keep) == 1 and keep[0].url == url
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(keep)
    methods: list[str] = []
    async with _recorder(methods) as h1, _recorder(methods) as h2:
        unary = ClientFactory(ClientConfig(streaming=False, httpx_client=h1)).create(card)
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=h2)).create(card)
        transport = JsonRpcTransport if proto == "1.0" else CompatJsonRpcTransport
        assert type(unary._transport) is transport  # type: ignore[attr-defined]
        async with unary, streaming:
            yield Peer(unary, streaming, methods)


def request(text: str, *, task: Task | None = None, **config: bool) -> SendMessageRequest:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task is not None:
        msg.task_id, msg.context_id = task.id, task.context_id
    return SendMessageRequest(message=msg, configuration=SendMessageConfiguration(**config))


async def send_one(client: Client, req: SendMessageRequest) -> Task:
    """A non-streaming send: exactly one response, a task."""
    responses = [r async for r in client.send_message(req)]
    assert [r.WhichOneof("payload") for r in responses] == ["task"]
    return responses[0].task


def state(task_or_status: Task | StreamResponse) -> str:
    if isinstance(task_or_status, Task):
        return TaskState.Name(task_or_status.status.state)
    kind = task_or_status.WhichOneof("payload")
    if kind == "task":
        return TaskState.Name(task_or_status.task.status.state)
    assert kind == "status_update", kind
    return TaskState.Name(task_or_status.status_update.status.state)


def status_text(task: Task) -> str:
    return "".join(p.text for p in task.status.message.parts)


def artifact_text(task: Task) -> str:
    assert len(task.artifacts) == 1
    return "".join(p.text for p in task.artifacts[0].parts)


def make_app() -> A2AApp:
    # A short grace: a test that fails half-way must not hold the server open for long.
    return A2AApp(demo_agent, grace=1.0)


async def test_blocking_send_get_and_failure(proto: str) -> None:
    async with served(make_app()) as url, sdk_peer(url, proto) as peer:
        task = await send_one(peer.unary, request("hello world"))
        assert state(task) == "TASK_STATE_COMPLETED"
        assert status_text(task) == "You said: hello world"
        assert task.artifacts[0].name == "reply"
        assert artifact_text(task) == "You said: hello world"
        assert task.history[0].role == Role.ROLE_USER
        assert task.history[0].parts[0].text == "hello world"

        got = await peer.unary.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert (got.id, got.context_id) == (task.id, task.context_id)
        assert state(got) == "TASK_STATE_COMPLETED"
        assert artifact_text(got) == "You said: hello world"
        assert [m.role for m in got.history] == [Role.ROLE_AGENT]  # the newest message only

        failed = await send_one(peer.unary, request("fail"))
        assert state(failed) == "TASK_STATE_FAILED"
        assert status_text(failed).startswith("RuntimeError (error id ")

        assert peer.methods == peer.expect(proto, "send", "get", "send")


async def test_stream_delivers_every_event_in_order(proto: str) -> None:
    async with served(make_app()) as url, sdk_peer(url, proto) as peer:
        events = [e async for e in peer.streaming.send_message(request("a b c"))]
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds == ["task", "status_update"] + ["artifact_update"] * 5 + ["status_update"]
        task = events[0].task
        assert state(events[0]) == "TASK_STATE_SUBMITTED"
        assert state(events[1]) == "TASK_STATE_WORKING"
        assert state(events[-1]) == "TASK_STATE_COMPLETED"
        assert events[-1].status_update.status.message.parts[0].text == "You said: a b c"
        chunks = [e.artifact_update for e in events[2:-1]]
        assert [c.artifact.parts[0].text for c in chunks] == ["You ", "said: ", "a ", "b ", "c"]
        assert [c.append for c in chunks] == [False, True, True, True, True]
        assert [c.last_chunk for c in chunks] == [False, False, False, False, True]
        assert len({c.artifact.artifact_id for c in chunks}) == 1
        assert {c.task_id for c in chunks} == {task.id}
        assert events[-1].status_update.task_id == task.id

        got = await peer.unary.get_task(GetTaskRequest(id=task.id))
        assert state(got) == "TASK_STATE_COMPLETED"
        assert artifact_text(got) == "You said: a b c"
        assert peer.methods == peer.expect(proto, "stream", "get")


async def test_return_immediately_then_subscribe_and_cancel(proto: str) -> None:
    async with served(make_app()) as url, sdk_peer(url, proto) as peer:
        task = await send_one(peer.unary, request("slow 30", return_immediately=True))
        assert state(task) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")

        seen: list[StreamResponse] = []
        subscribed = anyio.Event()

        async def subscriber() -> None:
            async for event in peer.streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                seen.append(event)
                subscribed.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscriber)
                await subscribed.wait()
                canceled = await peer.unary.cancel_task(CancelTaskRequest(id=task.id))
            # The subscriber's stream ended by itself, with the cancellation as its last event.
        assert state(canceled) == "TASK_STATE_CANCELED"
        assert status_text(canceled) == "Canceled: canceled by CancelTask"
        assert seen[0].WhichOneof("payload") == "task" and seen[0].task.id == task.id
        assert state(seen[0]) == "TASK_STATE_WORKING"
        assert state(seen[-1]) == "TASK_STATE_CANCELED"
        assert all(e.WhichOneof("payload") == "status_update" for e in seen[1:])

        got = await peer.unary.get_task(GetTaskRequest(id=task.id))
        assert state(got) == "TASK_STATE_CANCELED"
        with pytest.raises(TaskNotCancelableError, match="canceled"):
            await peer.unary.cancel_task(CancelTaskRequest(id=task.id))
        assert peer.methods == peer.expect(proto, "send", "subscribe", "cancel", "get", "cancel")


async def test_input_required_turn_while_subscribed(proto: str) -> None:
    """A multi-turn task: ask -> input required; a subscriber follows it to the answer."""
    async with served(make_app()) as url, sdk_peer(url, proto) as peer:
        asked = await send_one(peer.unary, request("ask"))
        assert state(asked) == "TASK_STATE_INPUT_REQUIRED"
        assert status_text(asked) == "What should I echo?"

        seen: list[StreamResponse] = []
        subscribed = anyio.Event()

        async def subscriber() -> None:
            async for event in peer.streaming.subscribe(SubscribeToTaskRequest(id=asked.id)):
                seen.append(event)
                subscribed.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscriber)
                await subscribed.wait()
                answered = await send_one(peer.unary, request("pineapple", task=asked))
        assert (answered.id, answered.context_id) == (asked.id, asked.context_id)
        assert state(answered) == "TASK_STATE_COMPLETED"
        assert status_text(answered) == "You said: pineapple"
        assert [(m.role, m.parts[0].text) for m in answered.history] == [
            (Role.ROLE_USER, "ask"), (Role.ROLE_AGENT, "What should I echo?"),
            (Role.ROLE_USER, "pineapple"), (Role.ROLE_AGENT, "You said: pineapple")]
        # The answer puts the task back to working, then it completes.
        assert [state(e) for e in seen] == [
            "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        assert seen[1].status_update.status.message.parts[0].text == "pineapple"
        assert seen[-1].status_update.status.message.parts[0].text == "You said: pineapple"
        assert peer.methods == peer.expect(proto, "send", "subscribe", "send")


async def test_list_tasks_pages_newest_first() -> None:
    async with served(make_app()) as url, sdk_peer(url, "1.0") as peer:
        tasks = [await send_one(peer.unary, request(word)) for word in ("one", "two", "three")]
        first = await peer.unary.list_tasks(ListTasksRequest(page_size=2))
        assert [t.id for t in first.tasks] == [tasks[2].id, tasks[1].id]
        assert first.total_size == 3 and first.next_page_token
        second = await peer.unary.list_tasks(
            ListTasksRequest(page_size=2, page_token=first.next_page_token))
        assert [t.id for t in second.tasks] == [tasks[0].id]
        assert not second.next_page_token
        assert status_text(second.tasks[0]) == "You said: one"
        only = await peer.unary.list_tasks(ListTasksRequest(context_id=tasks[1].context_id))
        assert [t.id for t in only.tasks] == [tasks[1].id]
        assert peer.methods[-3:] == ["ListTasks"] * 3


async def test_remote_errors_map_to_sdk_exceptions(proto: str) -> None:
    async with served(make_app()) as url, sdk_peer(url, proto) as peer:
        done = await send_one(peer.unary, request("hi"))
        with pytest.raises(TaskNotFoundError, match="no-such-task"):
            await peer.unary.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotCancelableError, match="completed"):
            await peer.unary.cancel_task(CancelTaskRequest(id=done.id))
        with pytest.raises(TaskNotFoundError, match="no-such-task"):
            async for _ in peer.streaming.subscribe(SubscribeToTaskRequest(id="no-such-task")):
                pytest.fail("no event expected")
        with pytest.raises(UnsupportedOperationError, match="completed"):
            async for _ in peer.streaming.subscribe(SubscribeToTaskRequest(id=done.id)):
                pytest.fail("no event expected")
        with pytest.raises(UnsupportedOperationError, match="terminal"):
            await send_one(peer.unary, request("more", task=done))
        # None of it touched the completed task.
        got = await peer.unary.get_task(GetTaskRequest(id=done.id))
        assert state(got) == "TASK_STATE_COMPLETED" and artifact_text(got) == "You said: hi"


async def test_create_client_from_card_picks_1_0() -> None:
    methods: list[str] = []
    async with served(make_app()) as url, _recorder(methods) as h:
        async with await create_client(url, ClientConfig(streaming=False, httpx_client=h)) as c:
            assert type(c._transport) is JsonRpcTransport  # type: ignore[attr-defined]
            task = await send_one(c, request("auto"))
        async with await create_client(url) as streaming:  # the default: streams
            events = [e async for e in streaming.send_message(request("auto"))]
    assert status_text(task) == "You said: auto"
    assert methods == ["SendMessage"]
    assert state(events[-1]) == "TASK_STATE_COMPLETED"
    assert events[0].WhichOneof("payload") == "task"
