"""Where the frameworks built on a2a-sdk keep their executor and their card (no framework import).

``serve --agent`` and ``from_executor`` take what a framework's user already has:

- an a2a-sdk ``AgentExecutor`` (any framework's: ADK's ``A2aAgentExecutor``, Strands'
  ``StrandsA2AExecutor``, BeeAI's ``ToolCallingAgentExecutor``...);
- **Strands**' ``A2AServer``: its executor (``request_handler.agent_executor``) and its
  ``public_agent_card`` (the agent's name and description, its tools as skills);
- a **CrewAI** ``Agent``: CrewAI ships no executor class, only the helpers
  ``crewai.a2a.utils.task.execute`` / ``cancel`` that its own server calls, so the agent is
  served through :func:`crewai_executor`, an executor made of exactly those two calls, and its
  card is the one CrewAI makes for it (``role`` as the name, its tools as skills), with the
  ``goal`` alone as the description (CrewAI adds the ``backstory``: a prompt, kept private).

Cards of a bare executor: BeeAI's executors carry their ``agent_card``; a Strands executor's
card is made as Strands' ``A2AServer`` makes it. Errors: a framework's card that cannot be made
(Strands refuses an agent without a description) is left out, logged at DEBUG: the server's
generated card stands.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Any

log = logging.getLogger("scoped_a2a.adapters")


def _from(obj: object, package: str) -> bool:
    module = type(obj).__module__
    return module == package or module.startswith(package + ".")


def is_crewai_agent(obj: object) -> bool:
    """True for a CrewAI ``Agent`` (by its class's module: CrewAI is not imported)."""
    return _from(obj, "crewai") and type(obj).__name__ == "Agent"


def wraps_executor(obj: object) -> bool:
    """True for a framework object this adapter serves that is not an executor itself."""
    return is_crewai_agent(obj) or _strands_server_executor(obj) is not None


def _strands_server_executor(obj: object) -> Any:
    if not _from(obj, "strands"):
        return None
    return getattr(getattr(obj, "request_handler", None), "agent_executor", None)


def unwrap(obj: Any) -> tuple[Any, Any]:
    """``(executor, card)`` for ``obj``: an executor and the card its framework knows for it
    (None when it knows none), or the executor inside a framework's server or agent."""
    if (executor := _strands_server_executor(obj)) is not None:
        return executor, _card(lambda: obj.public_agent_card)
    if is_crewai_agent(obj):
        return crewai_executor(obj), _card(lambda: _crewai_card(obj))
    return obj, executor_card(obj)


def executor_card(executor: Any) -> Any:
    """The card an executor's framework knows: BeeAI's ``agent_card``, or for Strands the card
    its ``A2AServer`` would publish; None otherwise."""
    card = getattr(executor, "agent_card", None)
    if card is not None and not callable(card):
        return card
    if _from(executor, "strands"):
        return _card(lambda: _strands_card(executor))
    return None


def _card(make: Any) -> Any:
    try:
        return make()
    except Exception:
        log.debug("the framework's card could not be made; the server's stands", exc_info=True)
        return None


def _strands_card(executor: Any) -> dict[str, Any]:
    # Strands' A2AServer builds a representative agent from the factory for its card (it
    # calls the factory once with a placeholder context id); so does this.
    agent = executor.agent
    if agent is None:
        agent = executor._agent_factory("agent-card")
    tools = agent.tool_registry.get_all_tools_config().values()
    return {"name": agent.name, "description": agent.description,
            "skills": [{"id": t["name"], "name": t["name"], "description": t["description"],
                        "tags": []} for t in tools]}


def _crewai_card(agent: Any) -> dict[str, Any]:
    cards = importlib.import_module("crewai.a2a.utils.agent_card")
    card: dict[str, Any] = cards._agent_to_agent_card(agent, "").model_dump(
        mode="json", by_alias=True, exclude_none=True)  # CrewAI's own, as its server makes it
    # CrewAI's description is goal + backstory; the backstory is the agent's prompt, which a
    # public card does not publish by default (pass card= to say more).
    card["description"] = agent.goal
    return card


@functools.cache
def _crewai_executor_type() -> type:
    """The executor class for CrewAI agents (made on first use: it imports CrewAI)."""
    from a2a.server.agent_execution import AgentExecutor

    task = importlib.import_module("crewai.a2a.utils.task")
    # CrewAI's ``execute`` goes through its ``cancellable`` decorator, which runs the work as a
    # new asyncio task and waits for it: cancelling the caller leaves that task (and its model
    # call) running, unowned; only CrewAI's cache flag, set by its ``cancel``, stops it, and
    # only while the caller still waits. The undecorated work (``functools.wraps`` keeps it as
    # ``__wrapped__``) runs in the caller's task instead, so the run's cancellation reaches
    # the model call itself. Without it (another CrewAI), the decorated ``execute``.
    work = getattr(getattr(task, "_execute_impl", None), "__wrapped__", None)

    class CrewAIExecutor(AgentExecutor):
        """A CrewAI agent as an a2a-sdk executor: CrewAI's own task helpers."""

        def __init__(self, agent: Any) -> None:
            self.agent = agent

        async def execute(self, context: Any, event_queue: Any) -> None:
            if work is None:
                await task.execute(self.agent, context, event_queue)
            else:
                await work(self.agent, context, event_queue, None, None)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            if work is None:  # the decorated execute stops on CrewAI's flag only
                await task.cancel(context, event_queue)
            # Otherwise execute was cancelled already; CrewAI's cancel would only set a flag
            # nobody reads (kept an hour in its cache) and enqueue a canceled the runtime
            # records itself.

    return CrewAIExecutor


def crewai_executor(agent: Any) -> Any:
    """An a2a-sdk (0.3) ``AgentExecutor`` running the CrewAI ``agent`` with CrewAI's helpers;
    the four lines a CrewAI user would write, so ``serve --agent`` takes the bare agent."""
    return _crewai_executor_type()(agent)
