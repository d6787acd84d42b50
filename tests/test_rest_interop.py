"""HTTP+JSON interop with the official a2a-sdk 1.3, both backends, real HTTP.

- the SDK's client with its REST transport (``RestTransport``, picked from our card's HTTP+JSON
  interface) against our server: send, stream, get, list, cancel, subscribe, push config CRUD,
  input-required, errors (the SDK maps our error bodies to its exception classes);
- our ``A2AClient`` against the SDK's own REST routes (tests/sdk_agent.py ``--rest``, under
  uvicorn in a subprocess; its card lists HTTP+JSON first, so the client picks REST by itself).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.transports.rest import RestTransport as SdkRestTransport
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from scoped_a2a import A2AApp, A2AClient
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.protocol.errors import TaskNotFound
from scoped_a2a.protocol.types import Message as OurMessage
from scoped_a2a.protocol.types import Task as OurTask
from scoped_a2a.protocol.types import TaskState as OurState
from scoped_a2a.push import PushSettings

from .helpers import free_port, served
from .push_receiver import Receiver, eventually, receiving
from .test_client_interop import SCRIPT

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def sdk_rest_client(url: str, *, streaming: bool, paths: list[str]
                          ) -> AsyncIterator[Client]:
    """The SDK's client from our card, on the HTTP+JSON interface only; ``paths`` records
    every request line it sends (proof it spoke REST)."""
    async with httpx.AsyncClient() as h:
        card = await A2ACardResolver(h, url).get_agent_card()
    keep = [i for i in card.supported_interfaces if i.protocol_binding == "HTTP+JSON"]
    assert len(keep) == 1
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(keep)

    async def record(request: httpx.Request) -> None:
        paths.append(f"{request.method} {request.url.path}")

    async with httpx.AsyncClient(event_hooks={"request": [record]}, timeout=15) as h:
        client = ClientFactory(ClientConfig(
            streaming=streaming, httpx_client=h, supported_protocol_bindings=["HTTP+JSON"],
        )).create(card)
        assert type(client._transport) is SdkRestTransport  # type: ignore[attr-defined]
        async with client:
            yield client


def request(text: str, *, task: Task | None = None, **config: bool) -> SendMessageRequest:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task is not None:
        msg.task_id, msg.context_id = task.id, task.context_id
    return SendMessageRequest(message=msg, configuration=SendMessageConfiguration(**config))


async def send_one(client: Client, req: SendMessageRequest) -> Task:
    responses = [r async for r in client.send_message(req)]
    assert [r.WhichOneof("payload") for r in responses] == ["task"]
    return responses[0].task


def state(item: Task | StreamResponse) -> str:
    if isinstance(item, Task):
        return TaskState.Name(item.status.state)
    kind = item.WhichOneof("payload")
    if kind == "task":
        return TaskState.Name(item.task.status.state)
    assert kind == "status_update", kind
    return TaskState.Name(item.status_update.status.state)


async def test_sdk_rest_client_against_our_server() -> None:
    paths: list[str] = []
    receiver = Receiver()
    app = A2AApp(demo_agent, grace=1.0, push=PushSettings(allow_hosts=("127.0.0.1",)))
    async with (
        receiving(receiver) as hook,
        served(app) as url,
        sdk_rest_client(url, streaming=False, paths=paths) as unary,
        sdk_rest_client(url, streaming=True, paths=paths) as streaming,
    ):
        # send (blocking) and get with historyLength
        task = await send_one(unary, request("hello world"))
        assert state(task) == "TASK_STATE_COMPLETED"
        assert "".join(p.text for p in task.artifacts[0].parts) == "You said: hello world"
        got = await unary.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert [m.role for m in got.history] == [Role.ROLE_AGENT]
        # stream
        events = [e async for e in streaming.send_message(request("a b c"))]
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds == ["task", "status_update"] + ["artifact_update"] * 5 + ["status_update"]
        assert state(events[-1]) == "TASK_STATE_COMPLETED"
        # list: filters and paging
        first = await unary.list_tasks(ListTasksRequest(page_size=1, include_artifacts=True))
        assert len(first.tasks) == 1 and first.next_page_token and first.total_size == 2
        assert first.tasks[0].artifacts
        ctx = await unary.list_tasks(ListTasksRequest(
            context_id=task.context_id, status=TaskState.TASK_STATE_COMPLETED))
        assert [t.id for t in ctx.tasks] == [task.id]
        # input-required, a subscriber follows it to the answer
        asked = await send_one(unary, request("ask"))
        assert state(asked) == "TASK_STATE_INPUT_REQUIRED"
        seen: list[StreamResponse] = []
        subscribed = anyio.Event()

        async def subscriber() -> None:
            async for event in streaming.subscribe(SubscribeToTaskRequest(id=asked.id)):
                seen.append(event)
                subscribed.set()

        # push config CRUD on the waiting task (its completion is then delivered)
        created = await unary.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=asked.id, id="cfg1", url=hook, token="t1"))
        assert (created.id, created.task_id, created.url) == ("cfg1", asked.id, hook)
        got_cfg = await unary.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=asked.id, id="cfg1"))
        assert got_cfg.token == "t1"
        listed = await unary.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=asked.id))
        assert [c.id for c in listed.configs] == ["cfg1"]
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscriber)
                await subscribed.wait()
                answered = await send_one(unary, request("pineapple", task=asked))
        assert state(answered) == "TASK_STATE_COMPLETED"
        assert [state(e) for e in seen] == [
            "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        await eventually(lambda: any(asked.id in r.body.decode() for r in receiver.accepted()))
        await unary.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=asked.id, id="cfg1"))
        with pytest.raises(TaskNotFoundError):
            await unary.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=asked.id, id="cfg1"))
        with pytest.raises(InvalidParamsError):
            await unary.create_task_push_notification_config(TaskPushNotificationConfig(
                task_id=asked.id, id="bad", url="http://127.0.0.2:9/hook"))
        # returnImmediately, subscribe, cancel
        running = await send_one(unary, request("slow 30", return_immediately=True))
        seen = []
        subscribed = anyio.Event()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscriber_of(streaming, running.id, seen, subscribed))
                await subscribed.wait()
                canceled = await unary.cancel_task(CancelTaskRequest(id=running.id))
        assert state(canceled) == "TASK_STATE_CANCELED"
        assert state(seen[-1]) == "TASK_STATE_CANCELED"
        # errors, mapped by the SDK from our error bodies
        with pytest.raises(TaskNotFoundError, match="no-such-task"):
            await unary.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotCancelableError, match="canceled"):
            await unary.cancel_task(CancelTaskRequest(id=running.id))
        with pytest.raises(UnsupportedOperationError, match="terminal"):
            await send_one(unary, request("more", task=task))
        with pytest.raises(UnsupportedOperationError):
            async for _ in streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                pytest.fail("no event expected")
    assert "POST /message:send" in paths and "POST /message:stream" in paths
    assert f"GET /tasks/{task.id}" in paths and "GET /tasks" in paths
    assert f"POST /tasks/{running.id}:cancel" in paths
    assert f"POST /tasks/{asked.id}:subscribe" in paths
    assert f"DELETE /tasks/{asked.id}/pushNotificationConfigs/cfg1" in paths
    assert not any(p == "POST /" for p in paths)  # no JSON-RPC at all


def subscriber_of(client: Client, task_id: str, seen: list[StreamResponse],
                  subscribed: anyio.Event):  # type: ignore[no-untyped-def]
    async def run() -> None:
        async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            seen.append(event)
            subscribed.set()

    return run


@pytest.fixture(scope="module", params=["card URL with /", "card URL without /"])
def sdk_rest_agent(request: pytest.FixtureRequest) -> Iterator[str]:
    """The a2a-sdk server with its REST routes, its card listing HTTP+JSON first; its
    HTTP+JSON URL with a trailing slash, and without (as ours publishes it): our client joins
    paths onto either."""
    port = free_port()
    extra = ["--rest-url-without-slash"] if "without" in request.param else []
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--port", str(port), "--rest",
                             *extra])
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + ".well-known/agent-card.json").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the a2a-sdk server did not start")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_our_client_against_the_sdk_rest_server(sdk_rest_agent: str) -> None:
    async with A2AClient(sdk_rest_agent) as client:
        assert await client.binding() == "rest"  # the card's first interface
        task = await client.send("hello")
        assert isinstance(task, OurTask) and task.status.state is OurState.COMPLETED
        assert "".join(p.text or "" for a in task.artifacts or [] for p in a.parts) == (
            "echo: hello")
        reply = await client.send("msg hi")
        assert isinstance(reply, OurMessage) and reply.text == "echo: msg hi"
        async with client.stream("slow") as events:
            kinds = [e.kind async for e in events]
        assert kinds == ["task", "statusUpdate", "artifactUpdate", "artifactUpdate",
                         "artifactUpdate", "statusUpdate"]
        got = await client.get_task(task.id, history_length=1)
        assert got.id == task.id and len(got.history or []) == 1
        listed = await client.list_tasks(page_size=1)
        assert len(listed.tasks) == 1 and listed.next_page_token
        asked = await client.send("ask")
        assert isinstance(asked, OurTask) and asked.status.state is OurState.INPUT_REQUIRED
        running = await client.send("long", return_immediately=True)
        assert isinstance(running, OurTask)
        async with client.subscribe(running.id) as events:
            first = await events.__anext__()
            assert first.kind == "task"
        canceled = await client.cancel(running.id)
        assert canceled.status.state is OurState.CANCELED
        with pytest.raises(TaskNotFound) as err:
            await client.get_task("no-such-task")
        assert err.value.code == -32001
