"""An agent served by the official a2a-sdk (1.0 and 0.3 on one URL), for interop tests.

Run as a script in a subprocess (the SDK server runs under uvicorn, not hypercorn's trio
worker): ``python tests/sdk_agent.py --port N [--only-v03-card] [--rest]``. By the user's text:

- ``msg ...``: replies with a direct message (no task);
- ``slow ...``: a task: working, three artifact chunks 0.1 s apart, completed;
- ``long ...``: the same with 100 chunks (10 s; a task to cancel or subscribe to);
- ``marathon ...``: the same with 300 chunks (30 s);
- ``ask ...``: the task ends input-required (answering it continues the task: its stream then
  begins with a status update, as the SDK's usual executor pattern gives);
- ``quiet ...``: a task that works 30 s without an event after ``working``;
- ``late ...``: the task event comes 0.5 s after the request, then as ``marathon``;
- ``fail ...``: the executor raises, the task fails;
- anything else: a task completed with the artifact ``echo: <text>``.

``GET /journal`` answers what the executor saw per task id: ``{"started": t, "cancelled": t,
"cancel_called": t}`` (``time.time()``; ``cancelled``: its ``execute`` was cancelled,
``cancel_called``: the SDK called ``cancel()``), so a test can tell whether and when a remote
task's work was stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

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
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

JOURNAL: dict[str, dict[str, Any]] = {}


async def _journal(request: Request) -> JSONResponse:
    return JSONResponse(JOURNAL)


JOURNAL_ROUTE = Route("/journal", _journal)
"""``GET /journal``: what the executor saw, per task id (see the module doc)."""


def _note(task_id: str | None, what: str) -> None:
    if task_id:
        JOURNAL.setdefault(task_id, {})[what] = time.time()


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        try:
            await self._execute(context, event_queue)
        except asyncio.CancelledError:
            _note(context.task_id, "cancelled")
            raise

    async def _execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if text.startswith("msg"):
            await event_queue.enqueue_event(
                new_text_message(f"echo: {text}", context_id=context.context_id))
            return
        task = context.current_task
        if text.startswith("late"):  # the task (the stream's first event) comes 0.5 s late
            await asyncio.sleep(0.5)
        if task is None:  # the first event of a task flow must be the task
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        _note(task.id, "started")
        up = TaskUpdater(event_queue, task.id, task.context_id)
        if text.startswith("fail"):
            raise RuntimeError("boom")
        if text.startswith("ask"):
            await up.requires_input(up.new_agent_message([new_text_part("need more")]))
            return
        if text.startswith("quiet"):
            await up.start_work(up.new_agent_message([new_text_part("working...")]))
            await asyncio.sleep(30)
            await up.complete()
            return
        if text.startswith("late"):
            text = "marathon"
        if text.startswith(("slow", "long", "marathon")):
            chunks = {"slow": 3, "long": 100, "marathon": 300}[text.split()[0]]
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
        _note(context.task_id, "cancel_called")
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

    return Starlette(routes=[JOURNAL_ROUTE, *routes])


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
