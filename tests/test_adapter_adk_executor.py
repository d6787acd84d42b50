"""Google ADK's own ``A2aAgentExecutor`` (a2a-sdk 1.x) served through ``from_executor``.

The other route for an ADK agent (``from_adk`` is tests/test_adapter_adk.py): ADK's executor
keeps ADK's own mapping of its events to A2A; ours adds the ownership semantics around it.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
from google.adk.a2a.executor.a2a_agent_executor import A2aAgentExecutor
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService

from scoped_a2a import A2AApp
from scoped_a2a.adapters.a2a_sdk import from_executor

from .adk_models import GATE, ScriptedLlm
from .helpers import rpc, served, text_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"]),
              pytest.mark.filterwarnings("ignore:.*EXPERIMENTAL.*:UserWarning")]


def adk_executor(script: list[list[object]]) -> tuple[A2aAgentExecutor, ScriptedLlm]:
    model = ScriptedLlm(script=script)
    agent = LlmAgent(name="helper", model=model, instruction="Answer briefly.")
    runner = Runner(app_name="helper", agent=agent, session_service=InMemorySessionService())
    return A2aAgentExecutor(runner=runner), model


def all_text(task: dict[str, object]) -> str:
    texts = []
    for artifact in task.get("artifacts") or []:  # type: ignore[attr-defined]
        texts += [p.get("text", "") for p in artifact["parts"]]
    message = task["status"].get("message") or {}  # type: ignore[attr-defined]
    texts += [p.get("text", "") for p in message.get("parts", [])]
    return "".join(texts)


async def test_adks_own_executor_answers_a_blocking_send() -> None:
    executor, _ = adk_executor([["Hello ", "from ADK"]])
    async with served(A2AApp(from_executor(executor))) as url, httpx.AsyncClient() as c:
        body = await rpc(c, url, "SendMessage", {"message": text_message("hi")})
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "Hello from ADK" in all_text(task)


async def test_a_hang_up_cancels_adks_executor_and_its_model_call() -> None:
    executor, model = adk_executor([["partial ", GATE, "never"]])
    app = A2AApp(from_executor(executor))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rpc, c, url, "SendMessage", {"message": text_message("hi")})
            with anyio.fail_after(10):
                await model.probe.entered.wait()
            tg.cancel_scope.cancel()  # the caller hangs up while the model call is in flight
        with anyio.fail_after(10):
            while app.runner.active:
                await anyio.sleep(0.02)
        listed = await rpc(c, url, "ListTasks", {})
    assert model.probe.ended == ["cancelled"]
    (task,) = listed["result"]["tasks"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    assert task["status"]["message"]["metadata"]["reason"] == "hang-up"
