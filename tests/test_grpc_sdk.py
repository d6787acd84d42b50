"""The official a2a-sdk's own gRPC client transport (``GrpcTransport`` on ``grpc.aio``) against
our gRPC binding, picked from our served card's GRPC interface: every method, streaming
included, errors mapped back to the SDK's error classes from their ErrorInfo details, a
cancelled call cancelling the run, and 3,000 calls on one connection none lost.

``grpc.aio`` runs on asyncio only, so the SDK client runs in a worker thread with its own
asyncio loop, on both backends of the server under test (served in the test's own loop).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.transports.grpc import GrpcTransport
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from scoped_a2a import A2AApp
from scoped_a2a.push import PushSettings

from .helpers import served
from .test_grpc import CANCELLED, agent

pytestmark = pytest.mark.anyio
T = TypeVar("T")


def request(text: str, **config: Any) -> SendMessageRequest:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=msg, configuration=SendMessageConfiguration(**config))


def state(task: Task) -> str:
    return str(TaskState.Name(task.status.state))


async def sdk_clients(url: str) -> tuple[Client, Client]:
    """Unary and streaming SDK clients built from our card, on its GRPC interface only."""
    async with httpx.AsyncClient() as h:
        card = await A2ACardResolver(h, url).get_agent_card()
    [grpc_interface] = [i for i in card.supported_interfaces if i.protocol_binding == "GRPC"]
    assert grpc_interface.url == url.split("//")[1].rstrip("/")

    def config(streaming: bool) -> ClientConfig:
        return ClientConfig(streaming=streaming, supported_protocol_bindings=["GRPC"],
                            grpc_channel_factory=grpc.aio.insecure_channel)

    unary = ClientFactory(config(False)).create(card)
    streaming = ClientFactory(config(True)).create(card)
    assert type(unary._transport) is GrpcTransport  # type: ignore[attr-defined]
    return unary, streaming


async def in_asyncio_thread(session: Callable[[], Awaitable[T]]) -> T:
    """Run an asyncio session (grpc.aio) in a worker thread with a loop of its own."""
    return await anyio.to_thread.run_sync(lambda: asyncio.run(session()))  # type: ignore[arg-type]


async def send_one(client: Client, req: SendMessageRequest) -> Task:
    responses = [r async for r in client.send_message(req)]
    assert [r.WhichOneof("payload") for r in responses] == ["task"]
    return responses[0].task


async def test_every_method_through_the_sdk_grpc_transport() -> None:
    app = A2AApp(agent, grpc=True, grace=1.0, extended_card={"description": "extended"},
                 push=PushSettings(allow_hosts=["127.0.0.1"]))
    async with served(app) as url:

        async def session() -> None:
            unary, streaming = await sdk_clients(url)
            async with unary, streaming:
                task = await send_one(unary, request("hello"))
                assert state(task) == "TASK_STATE_COMPLETED"
                assert task.artifacts[0].parts[0].text == "echo: hello"
                got = await unary.get_task(GetTaskRequest(id=task.id))
                assert got.id == task.id
                listed = await unary.list_tasks(ListTasksRequest(page_size=10))
                assert [t.id for t in listed.tasks] == [task.id]
                events = [e async for e in streaming.send_message(request("streamed"))]
                kinds = [e.WhichOneof("payload") for e in events]
                assert kinds[0] == "task" and "artifact_update" in kinds
                parked = await send_one(unary, request("sleep 0.5", return_immediately=True))
                seen = [e async for e in streaming.subscribe(
                    SubscribeToTaskRequest(id=parked.id))]
                assert seen[0].task.id == parked.id
                assert TaskState.Name(seen[-1].status_update.status.state) == \
                    "TASK_STATE_COMPLETED"
                asked = await send_one(unary, request("ask"))
                canceled = await unary.cancel_task(CancelTaskRequest(id=asked.id))
                assert state(canceled) == "TASK_STATE_CANCELED"
                config = TaskPushNotificationConfig(task_id=task.id, id="h",
                                                    url="http://127.0.0.1:9/hook")
                created = await unary.create_task_push_notification_config(config)
                assert created.id == "h"
                fetched = await unary.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task.id, id="h"))
                assert fetched.url == config.url
                configs = await unary.list_task_push_notification_configs(
                    ListTaskPushNotificationConfigsRequest(task_id=task.id))
                assert [c.id for c in configs.configs] == ["h"]
                await unary.delete_task_push_notification_config(
                    DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="h"))
                card = await unary.get_extended_agent_card(GetExtendedAgentCardRequest())
                assert card.description == "extended"
                # Errors come back as the SDK's own classes (from the ErrorInfo reason).
                with pytest.raises(TaskNotFoundError):
                    await unary.get_task(GetTaskRequest(id="no-such-task"))
                with pytest.raises(TaskNotCancelableError):
                    await unary.cancel_task(CancelTaskRequest(id=task.id))
                with pytest.raises(UnsupportedOperationError):
                    async for _ in streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                        pass

        await in_asyncio_thread(session)


async def test_sdk_errors_for_an_unconfigured_extended_card() -> None:
    async with served(A2AApp(agent, grpc=True, grace=1.0)) as url:

        async def session() -> None:
            unary, streaming = await sdk_clients(url)
            async with unary, streaming:
                # The public card says there is none: ask the transport directly.
                transport = unary._transport  # type: ignore[attr-defined]
                transport.agent_card = None
                with pytest.raises(ExtendedAgentCardNotConfiguredError):
                    await unary.get_extended_agent_card(GetExtendedAgentCardRequest())

        await in_asyncio_thread(session)


async def test_a_cancelled_sdk_stream_cancels_the_run_and_3000_calls_share_a_connection(
) -> None:
    app = A2AApp(agent, grpc=True, grace=1.0)
    async with served(app) as url:

        async def session() -> tuple[str, list[Task]]:
            unary, streaming = await sdk_clients(url)
            async with unary, streaming:
                started = asyncio.Event()
                ids: list[str] = []

                async def consume() -> None:
                    async for event in streaming.send_message(request("sleep 30")):
                        ids.append(event.task.id)
                        started.set()

                async with asyncio.TaskGroup() as tg:
                    consumer = tg.create_task(consume())
                    await started.wait()
                    consumer.cancel()  # the caller gives up: grpc.aio cancels the call
                task_id = ids[0]
                for _ in range(200):
                    got = await unary.get_task(GetTaskRequest(id=task_id))
                    if state(got) == "TASK_STATE_CANCELED":
                        break
                    await asyncio.sleep(0.02)
                done = await send_one(unary, request("hi"))
                results: list[Task] = []
                for start in range(0, 3000, 100):
                    async with asyncio.TaskGroup() as tg:
                        calls = [tg.create_task(unary.get_task(GetTaskRequest(id=done.id)))
                                 for _ in range(start, start + 100)]
                    results += [c.result() for c in calls]
                return task_id, results

        task_id, results = await in_asyncio_thread(session)
        assert task_id in CANCELLED
        assert len(results) == 3000 and all(state(t) == "TASK_STATE_COMPLETED" for t in results)
