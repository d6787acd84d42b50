"""Strands, BeeAI and CrewAI agents on their own A2A servers (a2a-sdk 0.3), for the benchmarks.

The agents are the tests' (``tests/sdk03/framework_agents.py``: each framework's agent on an
OpenAI-compatible model at ``$MODEL_URL``), so scoped-a2a serves the very same objects with
``serve --agent tests.sdk03.framework_agents:NAME``. Run as a script, one framework is served
the way that framework serves it, on the server the benchmarks name (hypercorn's asyncio worker):

- ``strands``: Strands' ``A2AServer.to_starlette_app()``;
- ``beeai``: what BeeAI's ``A2AServer.serve()`` builds around its ``ToolCallingAgentExecutor``
  (a2a-sdk's ``DefaultRequestHandler``, in-memory task store, ``A2AStarletteApplication``);
- ``crewai``: CrewAI ships helpers, not a server: an executor calling
  ``crewai.a2a.utils.task.execute`` / ``cancel`` (its ``cancellable`` wrapper included) on
  a2a-sdk's ``DefaultRequestHandler``, with the card CrewAI makes for the agent. One agent
  object takes one run at a time (CrewAI's ``AgentExecutor`` refuses a second: "Executor is
  already running"), so most concurrent sends fail;
- ``crewai-copy``: the same with ``agent.copy()`` per request (as a ``Crew`` copies its agents,
  and as scoped-a2a's adapter does), what a user who needs concurrent callers writes: no send
  fails, so its sends/s compare like for like.

Needs the a2a-sdk 0.3 environment (``.venv-sdk03``): ``python -m benchmarks.adapters03``.
"""

from __future__ import annotations

import importlib
from typing import Any

from benchmarks.peers._serve import arguments, run


def _sdk_app(executor: Any, card: Any) -> Any:
    from a2a.server.apps import A2AStarletteApplication
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.tasks import InMemoryTaskStore

    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore())
    return A2AStarletteApplication(agent_card=card, http_handler=handler).build()


def _crewai_app(agent: Any, port: int, *, copy: bool = False) -> Any:
    from a2a.server.agent_execution import AgentExecutor

    task = importlib.import_module("crewai.a2a.utils.task")
    cards = importlib.import_module("crewai.a2a.utils.agent_card")

    class CrewAIHelpers(AgentExecutor):
        async def execute(self, context: Any, event_queue: Any) -> None:
            await task.execute(agent.copy() if copy else agent, context, event_queue)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            await task.cancel(context, event_queue)

    card = cards._agent_to_agent_card(agent, f"http://127.0.0.1:{port}/")
    return _sdk_app(CrewAIHelpers(), card)


def build(framework: str, port: int) -> Any:
    from tests.sdk03 import framework_agents as agents

    if framework == "strands":
        return agents.strands_server().to_starlette_app()
    if framework == "beeai":
        executor = agents.beeai_executor()
        executor.agent_card.url = f"http://127.0.0.1:{port}/"
        return _sdk_app(executor, executor.agent_card)
    if framework in ("crewai", "crewai-copy"):
        return _crewai_app(agents.crewai_agent(), port, copy=framework == "crewai-copy")
    raise SystemExit(f"unknown framework {framework!r}: strands, beeai, crewai or crewai-copy")


if __name__ == "__main__":
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--framework", required=True)
    args = parser.parse_args()
    run(build(args.framework, args.port), args.server, args.port)
