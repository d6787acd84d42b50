"""An a2a-sdk server (under uvicorn, in a subprocess) whose agent forwards to the next hop.

``python tests/sdk_forward_agent.py --port N``. A message ``hop URL [URL...]`` is forwarded as
``hop [URL...]`` to URL with this project's ``A2AClient`` (a stream, read to its end), and the
task completes when the downstream one ends. The SDK server never cancels its executor when the
HTTP caller disconnects; a CancelTask does (it cancels the executor's coroutine, which abandons
the stream to the next hop). Anything else: the task works for ten seconds, then completes.
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette

from scoped_a2a import A2AClient


class Forwarder(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        words = context.get_user_input().split()
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        await up.start_work()
        if len(words) > 1 and words[0] == "hop":
            async with A2AClient(words[1]) as client, \
                    client.stream(" ".join(["hop", *words[2:]])) as events:
                async for _ in events:
                    pass
        else:
            await asyncio.sleep(10)
        await up.add_artifact([new_text_part("forwarded")], name="result")
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_app(port: int) -> Starlette:
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="sdk-forwarder", description="a2a-sdk hop", version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="hop", name="Hop", description="forwards", tags=["test"])],
    )
    handler = DefaultRequestHandler(agent_executor=Forwarder(), task_store=InMemoryTaskStore(),
                                    agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    return Starlette(routes=routes)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    uvicorn.run(build_app(args.port), host="127.0.0.1", port=args.port, log_level="warning")
