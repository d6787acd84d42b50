"""Push configs against the official a2a-sdk client, in 1.0 and in 0.3: a send carrying a config
is delivered to a real receiver, and the four config methods round-trip."""

from __future__ import annotations

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.push import PushSettings

from .helpers import served
from .push_receiver import Receiver, eventually, receiving

pytestmark = pytest.mark.anyio


def sdk_client(url: str, proto: str):  # type: ignore[no-untyped-def]
    """The SDK's client on exactly one protocol version (a card with one interface)."""
    card = AgentCard(name="remote", supported_interfaces=[AgentInterface(
        url=url, protocol_binding="JSONRPC", protocol_version=proto)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True))
    return ClientFactory(ClientConfig(streaming=False)).create(card)


@pytest.mark.parametrize("proto", ["1.0", "0.3"])
async def test_sdk_client_push_config_crud(proto: str) -> None:
    receiver = Receiver()
    app = A2AApp(demo_agent, push=PushSettings(allow_hosts=["127.0.0.1"], deliver="terminal"))
    async with receiving(receiver) as hook, served(app) as url:
        async with httpx.AsyncClient() as http:
            card = (await http.get(url + ".well-known/agent-card.json")).json()
        assert card["capabilities"]["pushNotifications"] is True
        async with sdk_client(url, proto) as client:
            # A send carrying a config: the result reaches the receiver, with the credentials.
            request = SendMessageRequest(
                message=new_text_message("hello", role=Role.ROLE_USER),
                configuration=SendMessageConfiguration(
                    task_push_notification_config=TaskPushNotificationConfig(
                        id="on-send", url=hook, token="tok",
                        authentication=AuthenticationInfo(scheme="Bearer",
                                                          credentials="secret"))))
            [answer] = [r async for r in client.send_message(request)]
            task = answer.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            await eventually(lambda: app.push.active == 0 and bool(receiver.requests))
            [got] = receiver.requests
            assert got.headers["authorization"] == "Bearer secret"
            assert got.headers["x-a2a-notification-token"] == "tok"
            if proto == "1.0":
                assert got.json["task"]["id"] == task.id
            else:
                assert got.json["kind"] == "task" and got.json["status"]["state"] == "completed"

            # CRUD on the task.
            hook2 = hook + "?n=2"
            created = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, id="cfg1", url=hook2, token="t1"))
            assert (created.id, created.task_id, created.url, created.token) == (
                "cfg1", task.id, hook2, "t1")
            got_cfg = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="cfg1"))
            assert got_cfg.url == hook2 and got_cfg.token == "t1"
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id))
            assert sorted(c.id for c in listed.configs) == ["cfg1", "on-send"]
            on_send = next(c for c in listed.configs if c.id == "on-send")
            assert on_send.authentication.scheme == "Bearer"
            assert on_send.authentication.credentials == "secret"
            assert await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="cfg1")) is None
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id))
            assert [c.id for c in listed.configs] == ["on-send"]
            with pytest.raises(TaskNotFoundError):
                await client.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task.id, id="cfg1"))
            with pytest.raises(InvalidParamsError) as refused:
                await client.create_task_push_notification_config(TaskPushNotificationConfig(
                    task_id=task.id, id="bad", url="http://127.0.0.2:9/hook"))
            assert "loopback" in str(refused.value)
            # The task was terminal when these configs were set: nothing more was delivered.
            assert len(receiver.requests) == 1
