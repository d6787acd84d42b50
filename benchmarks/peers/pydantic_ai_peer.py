"""A pydantic-ai agent whose model is an OpenAI-compatible endpoint: on fasta2a, or on scoped-a2a.

The model's base URL is read from the file ``$BENCH_DIR/model-url`` (the adapters scenario runs a
fake OpenAI-compatible endpoint, ``scoped_a2a.testing.fake_llm``, in the load generator and
writes its URL there before the servers start); ``$BENCH_MODEL_URL`` overrides it.

- On scoped-a2a, ``assistant`` is given to the CLI as it is (``serve`` adapts a pydantic-ai
  ``Agent`` with ``from_pydantic_ai``)::

      python -m scoped_a2a serve --backend asyncio \\
          --agent benchmarks.peers.pydantic_ai_peer:assistant

- Run as a script, it serves ``assistant`` on fasta2a the way fasta2a serves a pydantic-ai agent
  (pydantic-ai 2 removed ``Agent.to_a2a()``; ``fasta2a.pydantic_ai.agent_to_a2a`` replaces it):
  fasta2a's ``AgentWorker`` and in-memory storage and broker. One change, as in
  ``fasta2a_server.py``: fasta2a's worker loop runs one task at a time, so here it starts each
  task operation in a task group of its own (one process, unbounded concurrency, like the other
  servers). fasta2a answers ``SendMessage`` with a ``submitted`` task at once and never waits for
  the agent; its ``cancel_task`` does nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from benchmarks.peers._serve import arguments, run

MODEL_URL_FILE = "model-url"


def model_url() -> str:
    url = os.environ.get("BENCH_MODEL_URL")
    if url:
        return url
    base = os.environ.get("BENCH_DIR")
    if not base or not (Path(base) / MODEL_URL_FILE).exists():
        raise SystemExit("set BENCH_MODEL_URL to an OpenAI-compatible base URL (.../v1)")
    return (Path(base) / MODEL_URL_FILE).read_text().strip()


def build() -> Agent[None, str]:
    provider = OpenAIProvider(base_url=model_url(), api_key="not-set")
    return Agent(OpenAIChatModel("fake-model", provider=provider), name="bench-assistant",
                 instructions="Answer in one short sentence.")


assistant = build()


def build_fasta2a(port: int) -> Any:
    import anyio
    from fasta2a import FastA2A
    from fasta2a.broker import InMemoryBroker
    from fasta2a.pydantic_ai import AgentWorker
    from fasta2a.storage import InMemoryStorage

    class ConcurrentAgentWorker(AgentWorker[Any, Any]):
        async def _loop(self) -> None:
            # fasta2a's loop awaits each operation; this one starts each in the task group.
            async with anyio.create_task_group() as tg:
                async for operation in self.broker.receive_task_operations():
                    tg.start_soon(self._handle_task_operation, operation)

    storage: InMemoryStorage[Any] = InMemoryStorage()
    broker = InMemoryBroker()
    worker = ConcurrentAgentWorker(agent=assistant, broker=broker, storage=storage)

    @asynccontextmanager
    async def lifespan(app: FastA2A) -> AsyncIterator[None]:  # fasta2a's worker_lifespan
        async with app.task_manager, assistant, worker.run():
            yield

    return FastA2A(storage=storage, broker=broker, name=assistant.name,
                   url=f"http://127.0.0.1:{port}/", lifespan=lifespan)


if __name__ == "__main__":
    args = arguments(__doc__.splitlines()[0]).parse_args()
    run(build_fasta2a(args.port), args.server, args.port)
