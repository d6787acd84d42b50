"""The activity: one scoped-a2a step (a conversation with one A2A agent) per activity."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import activity

from scoped_a2a import A2AClient, DirectorySink
from scoped_a2a.protocol.types import Task
from scoped_a2a.temporal import ActivityStep


@dataclass
class StepInput:
    agent_url: str
    messages: list[str]
    out: str  # the step's trajectory folder (kept across attempts: a retry resumes into it)


@activity.defn
async def run_step(inp: StepInput) -> list[str]:
    """Send each message as a turn; return each turn's final state.

    The step heartbeats its followers' positions; a cancelled activity ends the step at once;
    a retried attempt takes over the turns the dead one had sent instead of sending them again.
    """
    states: list[str] = []
    async with A2AClient(inp.agent_url) as client, \
            ActivityStep(client, sink=DirectorySink(inp.out, resume=True)) as step:
        for message in inp.messages:
            result = await step.turn(message)
            states.append(result.status.state.value if isinstance(result, Task) else "message")
    return states
