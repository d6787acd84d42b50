"""The official a2a-sdk (1.x) server with the benchmark agent, on uvicorn or hypercorn asyncio.

Same commands as ``benchmarks/agents.py``, written the SDK's way (an AgentExecutor emitting the
Task, a working status, artifacts and the final status through a TaskUpdater), so each system
does the same work per request. Wiring follows the SDK's documented JSON-RPC setup with its
in-memory task store, or with ``--task-store postgresql://...`` its PostgreSQL one
(``DatabaseTaskStore`` on SQLAlchemy's asyncio engine and asyncpg: scenario 19).
"""

from __future__ import annotations

import asyncio
import os
import time

from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette

from benchmarks.peers._serve import arguments, run
from benchmarks.sidechannel import go_file, signal


class BenchExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        words = text.split()
        task = context.current_task
        if task is None:
            assert context.message is not None  # execute() is only called for a message
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        await up.start_work()
        command = words[0]
        if command == "echo":
            await up.add_artifact([new_text_part(f"echo: {text}")], name="echo")
        elif command == "stream":
            n = int(words[1])
            for i in range(n):
                await up.add_artifact([new_text_part(f"{i} ")], artifact_id="stream",
                                      name="stream", append=i > 0, last_chunk=i == n - 1)
        elif command == "hop" and len(words) > 3:
            # A middle hop of the chain scenario: forward the rest of the chain downstream.
            # CancelTask cancels this coroutine (the SDK cancels its producer task), which
            # abandons the stream below; a hang-up alone never reaches here.
            from scoped_a2a import A2AClient

            rest = " ".join(["hop", *words[1:3], *words[4:]])
            async with A2AClient(words[3]) as client, client.stream(rest) as events:
                async for _ in events:
                    pass
        elif command in ("slow", "hop"):
            key = words[1]
            signal("start", key)
            try:
                await asyncio.sleep(float(words[2]))
            except asyncio.CancelledError:
                signal("cancel", key)
                raise
            signal("done", key)
        elif command == "fanout":
            key, n, interval = words[1], int(words[2]), float(words[3])
            signal("start", key)
            path = go_file(key)
            async with asyncio.timeout(120):
                while path is not None and not os.path.exists(path):
                    await asyncio.sleep(0.002)
            for i in range(n):
                await up.add_artifact([new_text_part(f"fan {i} @T{time.monotonic():.9f}@")],
                                      artifact_id="fan", name="fan", append=i > 0,
                                      last_chunk=i == n - 1)
                await asyncio.sleep(interval)
        elif command == "event":
            key, seconds = words[1], float(words[2])
            try:
                for _ in range(10):
                    await asyncio.sleep(seconds / 10)
            except asyncio.CancelledError:
                signal("cancel", key)
                raise
            signal("done", key)
        else:
            raise ValueError(f"unknown benchmark command {command!r}")
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        up = TaskUpdater(event_queue, context.task_id, context.context_id)
        await up.cancel()


def task_store(url: str | None) -> TaskStore:
    """The SDK's in-memory store, or its DatabaseTaskStore on the PostgreSQL at ``url``."""
    if url is None:
        return InMemoryTaskStore()
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1),
                                 pool_size=12)
    return DatabaseTaskStore(engine)  # creates its table on first use


def build_app(port: int, store_url: str | None = None) -> Starlette:
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="bench", description="benchmark agent", version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="bench", name="bench", description="benchmark", tags=["bench"])],
    )
    handler = DefaultRequestHandler(agent_executor=BenchExecutor(),
                                    task_store=task_store(store_url), agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    return Starlette(routes=routes)


if __name__ == "__main__":
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--task-store", metavar="URL", help="postgresql://... (else memory)")
    args = parser.parse_args()
    run(build_app(args.port, args.task_store), args.server, args.port)
