"""Where the frameworks built on a2a-sdk keep their executor and their card (no framework import).

``serve --agent`` and ``from_executor`` take what a framework's user already has:

- an a2a-sdk ``AgentExecutor`` (any framework's: ADK's ``A2aAgentExecutor``, Strands'
  ``StrandsA2AExecutor``, BeeAI's ``ToolCallingAgentExecutor``...);
- **Strands**' ``A2AServer``: its executor (``request_handler.agent_executor``) and its
  ``public_agent_card`` (the agent's name and description, its tools as skills);
- a **CrewAI** ``Agent``: CrewAI ships no executor class, only the helpers
  ``crewai.a2a.utils.task.execute`` / ``cancel`` that its own server calls, so the agent is
  served through :func:`.crewai_runs.crewai_executor`, an executor made of CrewAI's ``execute``
  (one copy of the agent per run, its model calls closed when the run ends), and its card is
  the one CrewAI makes for it (``role`` as the name, its tools as skills), with the
  ``goal`` alone as the description (CrewAI adds the ``backstory``: a prompt, kept private).

BeeAI's executors run on a copy per run (:func:`for_one_run`).

Cards of a bare executor: BeeAI's executors carry their ``agent_card``; a Strands executor's
card is made as Strands' ``A2AServer`` makes it. Errors: a framework's card that cannot be made
(Strands refuses an agent without a description) is left out, logged at DEBUG: the server's
generated card stands.
"""

from __future__ import annotations

import copy
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


def for_one_run(executor: Any) -> Any:
    """The executor to run one run with: ``executor`` itself, or for BeeAI a shallow copy with
    an ``AbortController`` of its own.

    BeeAI's A2A executors (0.1.85) hold one ``AbortController`` for all their runs, and their
    ``cancel`` aborts it, never renewed: one call would abort every run in flight and every
    later one. On a copy per run (sharing the agent, which BeeAI clones per run anyway, the
    memory manager and the card) ``cancel`` is called as a2a-sdk's contract says and aborts
    that run only. (Neither it nor cancelling ``execute`` closes the model stream BeeAI's
    LiteLLM backend opened when the cancel lands between two chunks: the adapter closes it,
    :mod:`.run_generators`.)
    """
    controller = getattr(executor, "_abort_controller", None)
    if not _from(executor, "beeai_framework") or controller is None:
        return executor
    run = copy.copy(executor)
    run._abort_controller = type(controller)()
    return run


def unwrap(obj: Any) -> tuple[Any, Any]:
    """``(executor, card)`` for ``obj``: an executor and the card its framework knows for it
    (None when it knows none), or the executor inside a framework's server or agent."""
    if (executor := _strands_server_executor(obj)) is not None:
        return executor, _card(lambda: obj.public_agent_card)
    if is_crewai_agent(obj):
        from .crewai_runs import crewai_executor

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
