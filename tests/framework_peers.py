"""Agents on other frameworks' own A2A servers, offline, for the client's interop tests.

Run as a script in a subprocess: ``python tests/framework_peers.py --kind adk|fasta2a --port N``.

- ``adk``: a Google ADK ``LlmAgent`` served by ADK's ``to_a2a`` (a2a-sdk underneath), its model
  a ``BaseLlm`` of ours;
- ``fasta2a``: a pydantic-ai ``Agent`` served by fasta2a, its model a ``FunctionModel``.

The model, by the last user text: ``long TAG`` works 30 s in 0.1 s steps (a turn to give up on);
anything else is answered ``echo: TEXT (user turns: N)``, N counting the user messages the model
was given, so a test sees a conversation carried across turns. ``GET /journal`` answers, per
TAG, ``{"started": t, "cancelled": t, "steps": n}`` (``time.time()``; ``cancelled``: the model's
work was cancelled), so a test can tell whether giving up on a task stopped its work.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse

JOURNAL: dict[str, dict[str, float]] = {}


async def work(tag: str, on_step: Callable[[int], Awaitable[None]] | None = None) -> None:
    """30 s of work in 0.1 s steps, journalled under ``tag``."""
    entry = JOURNAL.setdefault(tag, {"steps": 0})
    entry["started"] = time.time()
    try:
        for i in range(300):
            await asyncio.sleep(0.1)
            entry["steps"] = i + 1
            if on_step is not None:
                await on_step(i)
    except asyncio.CancelledError:
        entry["cancelled"] = time.time()
        raise


async def journal(request: Request) -> JSONResponse:
    return JSONResponse(JOURNAL)


def reply(last: str, user_turns: int) -> str:
    return f"echo: {last} (user turns: {user_turns})"


def adk_app(port: int) -> Any:
    from google.adk.a2a.utils.agent_to_a2a import to_a2a
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class JournalLlm(BaseLlm):
        model: str = "journal"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            users = [c for c in llm_request.contents if c.role == "user"]
            last = "".join(p.text or "" for p in users[-1].parts or ()) if users else ""
            if last.startswith("long"):
                await work(last.split()[-1])
            text = reply(last, len(users))
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]),
                              partial=False, turn_complete=True)

    agent = LlmAgent(name="adk_peer", model=JournalLlm(), instruction="Echo.")
    app = to_a2a(agent, host="127.0.0.1", port=port)
    app.add_route("/journal", journal)
    return app


def fasta2a_app(port: int) -> Any:
    from contextlib import asynccontextmanager

    import anyio
    from fasta2a import FastA2A
    from fasta2a.broker import InMemoryBroker
    from fasta2a.pydantic_ai import AgentWorker
    from fasta2a.storage import InMemoryStorage
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        users = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                 if getattr(p, "part_kind", "") == "user-prompt"]
        last = str(users[-1]) if users else ""
        if last.startswith("long"):
            await work(last.split()[-1])
        return ModelResponse(parts=[TextPart(reply(last, len(users)))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="fasta2a-peer")

    class ConcurrentWorker(AgentWorker[Any, Any]):
        async def _loop(self) -> None:
            # fasta2a's own loop runs one task at a time: a 30 s turn would hold every other.
            async with anyio.create_task_group() as tg:
                async for operation in self.broker.receive_task_operations():
                    tg.start_soon(self._handle_task_operation, operation)

    storage: InMemoryStorage[Any] = InMemoryStorage()
    broker = InMemoryBroker()
    worker = ConcurrentWorker(agent=agent, broker=broker, storage=storage)

    @asynccontextmanager
    async def lifespan(app: FastA2A) -> Any:
        async with app.task_manager, worker.run():
            yield

    app = FastA2A(storage=storage, broker=broker, name="fasta2a-peer",
                  url=f"http://127.0.0.1:{port}", lifespan=lifespan)
    app.add_route("/journal", journal)
    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["adk", "fasta2a"], required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    build = adk_app if args.kind == "adk" else fasta2a_app
    uvicorn.run(build(args.port), host="127.0.0.1", port=args.port, log_level="warning")
