"""An agent for running the A2A conformance kit (a2aproject/a2a-tck): it parks first.

Serve it with ``python -m scoped_a2a serve --agent scoped_a2a.agents.conformance:conformance_agent
--no-cancel-on-disconnect`` (docs/conformance.md).

The kit's task helper sends a *blocking* SendMessage, takes the task from the answer, then polls
GetTask until the task is ``TASK_STATE_WORKING`` (5 s), and lists, filters and cancels such tasks;
another test continues the task with a second message right after the first answer. A blocking
send returns when the task ends or is interrupted, so an agent that works and completes (the demo
agent) answers with a completed task, which can neither become working again nor be continued.
This agent therefore:

1. **parks first**: asks for input (``TASK_STATE_INPUT_REQUIRED``), so the blocking send returns
   at once with a live task that a follow-up message can continue;
2. each follow-up that arrives within :data:`PARK_SECONDS` is echoed in an artifact, and the
   task parks again (the kit sends up to four follow-ups, up to 2 s apart);
3. once no follow-up came for :data:`PARK_SECONDS`, it reports ``TASK_STATE_WORKING`` and keeps
   working for :data:`WORK_SECONDS`, then completes with an echo of everything it was sent. The
   blocking caller has gone by then, so this phase needs a detached run
   (``--no-cancel-on-disconnect``); an interactive run is cancelled (reason ``hang-up``) as soon
   as its wait for a follow-up ends, since nobody holds it any more.

Cancellation (CancelTask, shutdown) ends it at any point: the task is canceled. It never fails
on its own. Its card accepts parts of any media type (``defaultInputModes: ["*/*"]``): it reads
the text and takes any other part without failing, and the kit sends binary parts
(``test_binary_data_handling``), which a card of text and JSON would refuse (-32005).
"""

from __future__ import annotations

from typing import Any

import anyio

from ..runtime.context import RunContext

PARK_SECONDS = 2.5
"""How long the task waits for a follow-up before it starts working on its own: longer than the
kit's longest pause between follow-ups (2 s), shorter than its wait for the working state
(5 s)."""

WORK_SECONDS = 60.0
"""How long the working phase lasts (long enough for the kit's list, filter and cancel tests)."""


class ConformanceAgent:
    """The agent (an object, so that it can carry its card fields)."""

    __name__ = "conformance_agent"  # the card's name, as when it was a function

    def card_fields(self) -> dict[str, Any]:
        return {"defaultInputModes": ["*/*"]}

    async def __call__(self, ctx: RunContext) -> str:
        return await _converse(ctx)


async def _converse(ctx: RunContext) -> str:
    said = [ctx.text.strip()]
    while True:
        answer: str | None = None
        # Why a deadline of the agent's own: the server's input timeout would fail the task;
        # here no answer is the normal case and leads to the working phase.
        with anyio.move_on_after(PARK_SECONDS):
            answer = await ctx.ask(
                f"Received {said[-1][:200]!r}; send a follow-up to continue this task.")
        if answer is None:
            break
        said.append(answer.strip())
        await ctx.artifact(f"You said: {said[-1]}", name="echo")
    reply = "You said: " + "; then: ".join(said)
    if ctx.detached:
        await ctx.working("working on it")
        await anyio.sleep(WORK_SECONDS)
    await ctx.artifact(reply, name="reply")
    return reply


conformance_agent = ConformanceAgent()
"""Serve this one: ``--agent scoped_a2a.agents.conformance:conformance_agent``."""
