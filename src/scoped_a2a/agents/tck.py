"""The scenario agent of the conformance kit's ``1.0-dev`` branch (a2aproject/a2a-tck).

Serve it with ``python -m scoped_a2a serve --agent scoped_a2a.agents.tck:tck_agent``
(``scripts/run_tck10.sh`` does, docs/conformance.md). The kit's Gherkin scenarios
(``scenarios/core_operations.feature`` and ``scenarios/streaming.feature``) say what the system
under test does for a message whose ``messageId`` starts with a given prefix; this agent follows
them, written against the public agent API only (:class:`~scoped_a2a.RunContext`, an
:class:`~scoped_a2a.runtime.outcome.Outcome`, or a returned ``Message`` for a direct reply), as
any user of the API would.

| prefix | what the agent does |
|---|---|
| ``tck-complete-task`` | completes with the message "Hello from TCK" |
| ``tck-artifact-{text,file,file-url,data}`` | one artifact of that kind, completes |
| ``tck-message-response`` | answers with a message and no task (a direct reply) |
| ``tck-input-required`` | asks for input; the answer is handled as a new message |
| ``tck-reject-task`` | rejects the task ("rejected") |
| ``tck-stream-*`` | working, an artifact (chunked for ``-chunked``), completed |
| ``test-resubscribe-message-id`` | working, waits 4 s (twice the kit's stream timeout), completes |
| anything else | completes with "Unhandled messageId prefix: <id>" |

Cancellation (CancelTask, a hang-up of an interactive run, shutdown) ends it at any point: the
task is canceled. It never fails on its own; ``ctx.ask`` failing (no answer within the server's
input timeout) fails the task as for any agent.
"""

from __future__ import annotations

import anyio

from ..protocol.ids import new_id
from ..protocol.types import Message, Part, Role
from ..runtime.context import RunContext
from ..runtime.outcome import Outcome

RESUBSCRIBE_WAIT = 4.0
"""Seconds the resubscription scenario works: "2x streaming timeout" (the kit's SUT uses 2 s)."""

FILE_PART = Part(raw=b"tck", media_type="text/plain", filename="output.txt")
URL_PART = Part(url="https://example.com/output.txt", media_type="text/plain",
                filename="output.txt")

# Each streamed scenario: its prefix and the text of its one artifact.
_STREAMED = (
    ("tck-stream-001", "Stream hello from TCK"),
    ("tck-stream-003", "Stream task lifecycle"),
    ("tck-stream-ordering-001", "Ordered output"),
    ("tck-stream-artifact-text", "Streamed text content"),
)


async def tck_agent(ctx: RunContext) -> str | Outcome | Message | None:
    # Why a loop: an input-required task continued by a follow-up runs the follow-up's
    # scenario (the kit's SUT is executed again with the new message).
    while True:
        mid = ctx.message.message_id
        if mid.startswith("tck-input-required"):
            await ctx.ask("Input required by the TCK scenario")
            continue
        return await _scenario(ctx, mid)


async def _scenario(ctx: RunContext, mid: str) -> str | Outcome | Message | None:
    """The end of one scenario; prefixes that extend others are tested first."""
    if mid.startswith("tck-stream-artifact-chunked"):
        await ctx.working()
        await ctx.artifact("chunk-1 ", append=True, last_chunk=False)
        await ctx.artifact("chunk-2", append=True, last_chunk=True)
        return None
    if mid.startswith("tck-stream-artifact-file"):
        await ctx.working()
        await ctx.artifact(parts=[FILE_PART])
        return None
    for prefix, text in _STREAMED:
        if mid.startswith(prefix):
            await ctx.working()
            await ctx.artifact(text)
            return None
    if mid.startswith("tck-stream-002"):
        return None
    if mid.startswith("test-resubscribe-message-id"):
        await ctx.working()
        await anyio.sleep(RESUBSCRIBE_WAIT)
        return None
    if mid.startswith("tck-artifact-file-url"):
        await ctx.artifact(parts=[URL_PART])
        return None
    if mid.startswith("tck-artifact-file"):
        await ctx.artifact(parts=[FILE_PART])
        return None
    if mid.startswith("tck-artifact-text"):
        await ctx.artifact("Generated text content")
        return None
    if mid.startswith("tck-artifact-data"):
        await ctx.artifact(data={"key": "value", "count": 42})
        return None
    if mid.startswith("tck-message-response"):
        return Message(message_id=new_id(), role=Role.AGENT,
                       parts=[Part(text="Direct message response")])
    if mid.startswith("tck-reject-task"):
        return Outcome.rejected("rejected")
    if mid.startswith("tck-complete-task"):
        return "Hello from TCK"
    return f"Unhandled messageId prefix: {mid}"
