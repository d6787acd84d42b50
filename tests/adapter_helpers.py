"""What the adapter tests (ADK, pydantic-ai, a2a-sdk) do the same way: hold a model or tool at a
gate, send, read and wait for a task over JSON-RPC, read its trajectory, and talk to a served
agent with a2a-sdk's client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from .helpers import rpc, text_message


@dataclass
class Gate:
    """Holds a tool (or a model) in flight until the test lets it go; records how it ended."""

    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    ended: list[str] = field(default_factory=list)
    """How each holder ended: ``released`` or ``cancelled``."""

    async def hold(self) -> None:
        self.entered.set()
        try:
            await self.release.wait()
        except BaseException:
            self.ended.append("cancelled")
            raise
        self.ended.append("released")


ENDED = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}


async def send(client: httpx.AsyncClient, url: str, text: str, **params: Any) -> dict[str, Any]:
    """A blocking ``SendMessage`` of ``text``; ``message=`` adds fields to the message
    (``contextId``...), ``headers=`` goes with the request; the rest are request params."""
    message = text_message(text, **params.pop("message", {}))
    body = await rpc(client, url, "SendMessage", {"message": message, **params},
                     headers=params.pop("headers", None))
    assert "result" in body, body
    task: dict[str, Any] = body["result"]["task"]
    return task


async def get(client: httpx.AsyncClient, url: str, task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = (await rpc(client, url, "GetTask", {"id": task_id}))["result"]
    return task


async def until_ended(client: httpx.AsyncClient, url: str, task_id: str) -> dict[str, Any]:
    """The task once it has ended (polled; fails after 10 s)."""
    with anyio.fail_after(10):
        while (task := await get(client, url, task_id))["status"]["state"] not in ENDED:
            await anyio.sleep(0.02)
    return task


def status_text(task: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in task["status"]["message"]["parts"])


async def trajectory(client: httpx.AsyncClient, url: str, task_id: str) -> list[dict[str, Any]]:
    """The agent's own trajectory events (data only), read with the trajectory read method."""
    page = (await rpc(client, url, "scoped_a2a/trajectory/read",
                      {"taskId": task_id, "after": 0}))["result"]
    assert not page["hasMore"]
    return [e["event"]["data"] for e in page["events"] if e["kind"] == "trajectory"]


async def sdk_send(client: httpx.AsyncClient, url: str, text: str) -> Any:
    """Send ``text`` to the agent at ``url`` with a2a-sdk's own client (non-streaming, found
    through the served card); returns the task it answers with (an a2a-sdk protobuf ``Task``)."""
    from a2a.client import ClientConfig, ClientFactory
    from a2a.client.card_resolver import A2ACardResolver
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    card = await A2ACardResolver(client, url).get_agent_card()
    sdk = ClientFactory(ClientConfig(streaming=False, httpx_client=client)).create(card)
    msg = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text=text)])
    responses = [r async for r in sdk.send_message(SendMessageRequest(message=msg))]
    [task] = [r.task for r in responses]
    return task
