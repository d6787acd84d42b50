"""An agent served by the official a2a-sdk (1.0 and 0.3 on one URL), for interop tests.

Run as a script in a subprocess (the SDK server runs under uvicorn, not hypercorn's trio
worker): ``python tests/sdk_agent.py --port N [--only-v03-card] [--rest]``. By the user's text:

- ``msg ...``: replies with a direct message (no task);
- ``slow ...``: a task: working, three artifact chunks 0.1 s apart, completed;
- ``long ...``: the same with 100 chunks (10 s; a task to cancel or subscribe to);
- ``ask ...``: the task ends input-required;
- ``fail ...``: the executor raises, the task fails;
- anything else: a task completed with the artifact ``echo: <text>``.
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
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if text.startswith("msg"):
            await event_queue.enqueue_event(
                new_text_message(f"echo: {text}", context_id=context.context_id))
            return
        task = context.current_task
        if task is None:  # the first event of a task flow must be the task
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        if text.startswith("fail"):
            raise RuntimeError("boom")
        if text.startswith("ask"):
            await up.requires_input(up.new_agent_message([new_text_part("need more")]))
            return
        if text.startswith(("slow", "long")):
            chunks = 3 if text.startswith("slow") else 100
            await up.start_work(up.new_agent_message([new_text_part("working...")]))
            for i in range(chunks):
                await asyncio.sleep(0.1)
                await up.add_artifact([new_text_part(f"chunk{i} ")], artifact_id="out",
                                      name="result", append=i > 0, last_chunk=i == chunks - 1)
            await up.complete()
            return
        await up.add_artifact([new_text_part(f"echo: {text}")], name="echo")
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_app(port: int, only_v03: bool, rest: bool = False,
              rest_url_slash: bool = True) -> Starlette:
    url = f"http://127.0.0.1:{port}/"
    rest_url = url if rest_url_slash else url.rstrip("/")
    interfaces = [] if only_v03 else [
        AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")]
    if rest:  # HTTP+JSON first: a client that follows the card's order picks it
        interfaces.insert(0, AgentInterface(url=rest_url, protocol_binding="HTTP+JSON",
                                            protocol_version="1.0"))
    interfaces.append(AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"))
    card = AgentCard(
        name="sdk-agent", description="a2a-sdk interop peer", version="1.0.0",
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="echoes", tags=["test"])],
    )
    push_store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card,
        push_config_store=push_store,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(), push_store),
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(
        handler, rpc_url="/", enable_v0_3_compat=True)
    if rest:
        routes += create_rest_routes(handler)
    return Starlette(routes=routes)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--only-v03-card", action="store_true")
    ap.add_argument("--rest", action="store_true", help="also serve the HTTP+JSON routes")
    ap.add_argument("--rest-url-without-slash", action="store_true",
                    help="the card's HTTP+JSON interface URL without its trailing slash")
    args = ap.parse_args()
    uvicorn.run(build_app(args.port, args.only_v03_card, args.rest,
                          not args.rest_url_without_slash), host="127.0.0.1",
                port=args.port, log_level="warning")
