"""Agents of the frameworks still on a2a-sdk 0.3, as their users write them, on an OpenAI-
compatible model at ``MODEL_URL`` (the tests' fake, ``scoped_a2a.testing.fake_llm``).

Module attributes ``strands``, ``beeai``, ``crewai`` are what ``serve --agent
tests.sdk03.framework_agents:NAME`` loads (made on first use: a process imports one framework);
the model URL is read when a model is made.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no download at import
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")


def model_url() -> str:
    return os.environ.get("MODEL_URL", "http://127.0.0.1:9/v1")


# --- Strands ---------------------------------------------------------------------------------

def strands_agent(context_id: str = "") -> Any:
    """A Strands agent (the A2AServer's agent_factory: one per context)."""
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def shout(text: str) -> str:
        """Say the text louder."""
        return text.upper()

    model = OpenAIModel(client_args={"base_url": model_url(), "api_key": "unused"},
                        model_id="fake-model")
    return Agent(model=model, name="Greeter", description="Greets people.", tools=[shout],
                 callback_handler=None)


def strands_server() -> Any:
    from strands.multiagent.a2a import A2AServer

    return A2AServer(agent_factory=strands_agent, enable_a2a_compliant_streaming=True)


def strands_executor() -> Any:
    from strands.multiagent.a2a import StrandsA2AExecutor

    return StrandsA2AExecutor(agent_factory=strands_agent, enable_a2a_compliant_streaming=True)



# --- BeeAI -----------------------------------------------------------------------------------

def beeai_executor() -> Any:
    """BeeAI's ToolCallingAgentExecutor around a RequirementAgent, as BeeAI's A2AServer makes
    it (that server builds its executor only inside its blocking ``serve()``)."""
    from a2a.types import AgentCapabilities, AgentCard
    from beeai_framework.adapters.a2a.serve.executors.tool_calling_agent_executor import (
        ToolCallingAgentExecutor,
    )
    from beeai_framework.adapters.openai.backend.chat import OpenAIChatModel
    from beeai_framework.agents.requirement import RequirementAgent
    from beeai_framework.backend import ChatModelParameters
    from beeai_framework.memory import UnconstrainedMemory
    from beeai_framework.serve.utils import UnlimitedMemoryManager

    llm = OpenAIChatModel("fake-model", base_url=model_url(), api_key="unused",
                          parameters=ChatModelParameters(stream=True))
    llm.tool_choice_support = {"auto", "none"}  # the fake answers any tool_choice
    agent = RequirementAgent(llm=llm, memory=UnconstrainedMemory(), name="Bee",
                             description="Answers as a bee would.")
    card = AgentCard(name="Bee", description="Answers as a bee would.", url="http://unused/",
                     version="1.0.0", capabilities=AgentCapabilities(streaming=True),
                     default_input_modes=["text"], default_output_modes=["text"], skills=[])
    return ToolCallingAgentExecutor(agent, card, memory_manager=UnlimitedMemoryManager())



# --- CrewAI ----------------------------------------------------------------------------------

def crewai_agent() -> Any:
    """A CrewAI Agent: CrewAI has no executor class, ``serve --agent`` takes the agent."""
    from crewai import LLM, Agent

    llm = LLM(model="openai/fake-model", base_url=model_url(), api_key="unused", stream=True)
    return Agent(role="Helper", goal="Help people.", backstory="A private backstory.", llm=llm,
                 verbose=False)


_MADE = {"strands": strands_server, "beeai": beeai_executor, "crewai": crewai_agent}
_made: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """``strands``, ``beeai``, ``crewai``: what ``serve --agent ...:NAME`` loads, made (and its
    framework imported) on first use, so a process imports only the framework it serves."""
    if name not in _MADE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _made:
        _made[name] = _MADE[name]()
    return _made[name]
