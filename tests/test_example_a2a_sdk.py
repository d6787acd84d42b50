"""examples/a2a_sdk_agent: an a2a-sdk executor calling a model, run offline against a fake
OpenAI-compatible endpoint on loopback (scoped_a2a.testing.fake_llm)."""

from __future__ import annotations

import os

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.adapters.a2a_sdk import from_executor
from scoped_a2a.testing.fake_llm import fake_chat_model

from .helpers import rpc, served, text_message
from .test_cli import start, stop

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def test_the_example_served_by_the_cli_streams_the_models_answer() -> None:
    async with fake_chat_model(lambda body: ["Paris ", "is ", "the capital."]) as llm:
        os.environ["MODEL_URL"] = llm.url
        try:
            proc, url, log = await anyio.to_thread.run_sync(lambda: start(
                "--agent", "examples.a2a_sdk_agent.agent:executor", "--backend", "asyncio"))
        finally:
            del os.environ["MODEL_URL"]
        try:
            async with httpx.AsyncClient(timeout=20) as c:
                card = (await c.get(url + ".well-known/agent-card.json")).json()
                body = await rpc(c, url, "SendMessage",
                                 {"message": text_message("capital of France?")})
        finally:
            await anyio.to_thread.run_sync(stop, proc, log)
    assert card["name"] == "Chat (a2a-sdk executor)"
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    (reply,) = task["artifacts"]
    assert "".join(p["text"] for p in reply["parts"]) == "Paris is the capital."
    assert llm.requests[0]["messages"][-1]["content"] == "capital of France?"


async def test_a_hang_up_closes_the_examples_model_call() -> None:
    from examples.a2a_sdk_agent.agent import ChatExecutor

    async with fake_chat_model(lambda body: ["thinking..."], hold=True) as llm:
        app = A2AApp(from_executor(ChatExecutor(model_url=llm.url)))
        async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(rpc, c, url, "SendMessage", {"message": text_message("hi")})
                with anyio.fail_after(10):
                    await llm.in_flight.wait()
                hung_up = anyio.current_time()
                tg.cancel_scope.cancel()
            with anyio.fail_after(5):
                await llm.connections[0].closed_by_client.wait()
            closed_after = anyio.current_time() - hung_up
            listed = await rpc(c, url, "ListTasks", {})
    assert closed_after < 1.0
    (task,) = listed["result"]["tasks"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    assert task["status"]["message"]["metadata"]["reason"] == "hang-up"
