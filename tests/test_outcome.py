"""How a native agent's return value ends its task, over real HTTP (runtime/outcome.py).

An :class:`Outcome` ends the task in its state with its message (the reason in the metadata of
an end other than completed); a returned :class:`Message` answers a blocking send with that
message and no task; a value of any other type fails the task saying what was returned.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.types import Message, Part, Role
from scoped_a2a.runtime.outcome import Outcome

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


async def ends(ctx: RunContext) -> Any:
    if ctx.text == "reject":
        return Outcome.rejected("out of scope: ask about orders")
    if ctx.text == "fail":
        return Outcome.failed(Message(message_id="own", role=Role.AGENT, metadata={"k": 1},
                                      parts=[Part(text="no stock"), Part(data={"sku": 7})]))
    if ctx.text == "reply":
        return Message(message_id="direct", role=Role.AGENT, parts=[Part(text="just this")])
    return {"not": "an answer"}


async def send(client: httpx.AsyncClient, url: str, text: str) -> dict[str, Any]:
    body = await rpc(client, url, "SendMessage", {"message": text_message(text)})
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


async def test_an_outcome_ends_the_task_in_its_state_with_its_message() -> None:
    async with served(A2AApp(ends)) as url, httpx.AsyncClient() as client:
        rejected = (await send(client, url, "reject"))["task"]
        failed = (await send(client, url, "fail"))["task"]
    assert rejected["status"]["state"] == "TASK_STATE_REJECTED"
    message = rejected["status"]["message"]
    assert message["parts"] == [{"text": "out of scope: ask about orders"}]
    assert message["metadata"] == {"reason": "rejected"}
    assert message["taskId"] == rejected["id"]
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    message = failed["status"]["message"]
    # The agent's own message, kept whole (its id, parts and metadata), tied to the task.
    assert message["messageId"] == "own"
    assert message["parts"] == [{"text": "no stock"}, {"data": {"sku": 7}}]
    assert message["metadata"] == {"reason": "failed", "k": 1}
    assert (message["taskId"], message["contextId"]) == (failed["id"], failed["contextId"])


async def test_a_returned_message_is_the_answer_not_a_task() -> None:
    async with served(A2AApp(ends)) as url, httpx.AsyncClient() as client:
        result = await send(client, url, "reply")
    assert "task" not in result
    assert result["message"]["messageId"] == "direct"
    assert result["message"]["parts"] == [{"text": "just this"}]
    assert "taskId" not in result["message"]


async def test_another_return_type_fails_the_task_naming_it() -> None:
    async with served(A2AApp(ends)) as url, httpx.AsyncClient() as client:
        task = (await send(client, url, "other"))["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    [part] = task["status"]["message"]["parts"]
    assert part["text"] == "the agent returned dict, not str, Message, Outcome or None"
    assert task["status"]["message"]["metadata"] == {"reason": "error"}
