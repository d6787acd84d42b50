"""The official a2a-sdk server with the conformance kit's scenario agent, for comparison.

    python scripts/tck10_sdk_server.py --port N

The executor follows the kit's Gherkin scenarios (``scenarios/*.feature`` of a2a-tck's
``1.0-dev``) as ``scoped_a2a.agents.tck`` does, ported from the kit's own generated a2a-python
SUT (``sut/a2a-python/sut_agent.py``) to a2a-sdk 1.3's API (a task flow enqueues its Task
first). JSON-RPC at ``/`` and HTTP+JSON at the root, both declared in the card under the same
URL as scoped-a2a's run (no trailing slash: see docs/conformance.md), under uvicorn.
"""

from __future__ import annotations

import argparse
import asyncio

import httpx
import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Value
from starlette.applications import Starlette

FILE = {"raw": b"tck", "media_type": "text/plain", "filename": "output.txt"}
STREAMED = (("tck-stream-001", "Stream hello from TCK"),
            ("tck-stream-003", "Stream task lifecycle"),
            ("tck-stream-ordering-001", "Ordered output"),
            ("tck-stream-artifact-text", "Streamed text content"))


class TckExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        mid = context.message.message_id
        if mid.startswith("tck-message-response"):
            await event_queue.enqueue_event(
                new_text_message("Direct message response", context_id=context.context_id))
            return
        task = context.current_task
        if task is None:  # a task flow's first event is the task
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        if mid.startswith("tck-input-required"):
            await up.requires_input()
            return
        if mid.startswith("tck-reject-task"):
            await up.reject(up.new_agent_message([new_text_part("rejected")]))
            return
        if mid.startswith("tck-stream-artifact-chunked"):
            await up.start_work()
            await up.add_artifact([Part(text="chunk-1 ")], append=True)
            await up.add_artifact([Part(text="chunk-2")], append=True, last_chunk=True)
            await up.complete()
            return
        if mid.startswith("tck-stream-artifact-file"):
            await up.start_work()
            await up.add_artifact([Part(**FILE)])  # type: ignore[arg-type]
            await up.complete()
            return
        for prefix, text in STREAMED:
            if mid.startswith(prefix):
                await up.start_work()
                await up.add_artifact([Part(text=text)])
                await up.complete()
                return
        if mid.startswith("test-resubscribe-message-id"):
            await up.start_work()
            await asyncio.sleep(4)
            await up.complete()
            return
        if mid.startswith("tck-artifact-file-url"):
            await up.add_artifact([Part(url="https://example.com/output.txt",
                                        media_type="text/plain", filename="output.txt")])
        elif mid.startswith("tck-artifact-file"):
            await up.add_artifact([Part(**FILE)])  # type: ignore[arg-type]
        elif mid.startswith("tck-artifact-text"):
            await up.add_artifact([Part(text="Generated text content")])
        elif mid.startswith("tck-artifact-data"):
            value = json_format.Parse('{"key": "value", "count": 42}', Value())
            await up.add_artifact([Part(data=value)])
        elif mid.startswith("tck-stream-002"):
            pass
        elif mid.startswith("tck-complete-task"):
            await up.complete(up.new_agent_message([new_text_part("Hello from TCK")]))
            return
        else:
            await up.complete(up.new_agent_message(
                [new_text_part(f"Unhandled messageId prefix: {mid}")]))
            return
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_app(port: int) -> Starlette:
    url = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="a2a-sdk TCK scenario agent", description="a2a-sdk 1.3 with the kit's scenarios",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="HTTP+JSON", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id="tck", name="TCK", description="TCK scenarios", tags=["tck"])],
    )
    push_store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=TckExecutor(), task_store=InMemoryTaskStore(), agent_card=card,
        push_config_store=push_store,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(), push_store),
    )
    routes = (create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
              + create_rest_routes(handler))
    return Starlette(routes=routes)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    uvicorn.run(build_app(args.port), host="127.0.0.1", port=args.port, log_level="warning")
