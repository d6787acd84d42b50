"""Strands, BeeAI and CrewAI agents (a2a-sdk 0.3 generation), unchanged, served here.

Real framework objects (tests/sdk03/framework_agents.py) whose model is the fake OpenAI-
compatible endpoint on loopback, which streams its reply a token at a time, so each test sees
what reached the model and when the framework closed its call. In-process through hypercorn,
and one real ``serve --agent`` process per framework. asyncio only: every one of them is
asyncio-bound (the trio refusal is the runner's, tested in test_adapter_sdk03.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.adapters.a2a_sdk import from_executor
from scoped_a2a.testing.fake_llm import Chunk, FakeChatModel, ToolCall, fake_chat_model

from ..adapter_helpers import get
from ..helpers import rpc, served, sse_events, text_message
from ..test_cli import start, stop
from . import framework_agents as agents

pytestmark = [pytest.mark.anyio, pytest.mark.sdk03,
              pytest.mark.parametrize("anyio_backend", ["asyncio"])]

TOKENS = [f"t{i} " for i in range(50)]
DETACH = RunPolicy(detach_metadata={"evoai_crm_event": frozenset({"inactivity_action"})})


@dataclass(frozen=True)
class Framework:
    name: str
    make: Callable[[], Any]
    """What the user has (an executor, a server, an agent): given to from_executor as is."""
    target: str
    """``serve --agent`` of the same."""
    card_name: str
    answer: Callable[[list[str]], list[Chunk]] = list
    """The model's reply for these text tokens, as this framework wants it."""
    keeps_history: bool = True
    """CrewAI makes a new Task of each message, on its own server as here: no history."""


def final_answer(text: list[str]) -> list[Chunk]:
    """BeeAI's RequirementAgent forces its ``final_answer`` tool: the text streams, then the
    tool call carries the answer."""
    return [*text, ToolCall("final_answer", {"response": "".join(text)})]


FRAMEWORKS = [
    Framework("strands", agents.strands_server, "tests.sdk03.framework_agents:strands",
              "Greeter"),
    Framework("beeai", agents.beeai_executor, "tests.sdk03.framework_agents:beeai", "Bee",
              final_answer),
    Framework("crewai", agents.crewai_agent, "tests.sdk03.framework_agents:crewai", "Helper",
              keeps_history=False),
]
by_name = pytest.mark.parametrize("fw", FRAMEWORKS, ids=[f.name for f in FRAMEWORKS])


def replying(fw: Framework, text: list[str]) -> Callable[[dict[str, Any]], list[Chunk]]:
    return lambda body: fw.answer(text)


def answer_text(task: dict[str, Any]) -> str:
    """The answer as the caller reads it: the artifacts' text, else the status message's."""
    texts = [p.get("text", "") for a in task.get("artifacts") or () for p in a["parts"]]
    if any(texts):
        return "".join(texts)
    message = task["status"].get("message") or {"parts": []}
    return "".join(p.get("text", "") for p in message["parts"])


@pytest.fixture
def model_env() -> Any:
    """MODEL_URL is read whenever a framework makes its model: set it per test."""
    yield
    os.environ.pop("MODEL_URL", None)


async def _model(fake: FakeChatModel) -> Any:
    with anyio.fail_after(10):
        while not fake.connections or fake.connections[-1].chunks_sent < 3:
            await anyio.sleep(0.002)
    return fake.connections[-1]


async def _closed_after(conn: Any, hung_up: float) -> tuple[float, int]:
    """Seconds from the hang-up to the model's connection closed, and the tokens the model
    sent after the hang-up (chunks_sent then vs 0.3 s after the close)."""
    with anyio.fail_after(5):
        await conn.closed_by_client.wait()
    closed = conn.closed_at - hung_up
    return closed, conn.chunks_sent


@by_name
async def test_blocking_and_streamed_answers_arrive_whole(fw: Framework, model_env: Any) -> None:
    async with fake_chat_model(replying(fw, TOKENS)) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            body = await rpc(c, url, "SendMessage", {"message": text_message("hello")})
            task = body["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            assert answer_text(task) == "".join(TOKENS)
            events = []
            async with c.stream("POST", url, headers={"A2A-Version": "1.0"}, json={
                    "jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage",
                    "params": {"message": text_message("again")}}) as r:
                async for _, data in sse_events(r):
                    events.append(data["result"])
            streamed = await get(c, url, events[0]["task"]["id"])
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert answer_text(streamed) == "".join(TOKENS)
        assert "again" in json.dumps(fake.requests[-1]["messages"][-1]["content"])


@by_name
async def test_a_hang_up_closes_the_model_call_and_records_canceled(
        fw: Framework, model_env: Any, caplog: pytest.LogCaptureFixture) -> None:
    async with fake_chat_model(replying(fw, TOKENS), delay=0.02) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(rpc, c, url, "SendMessage", {"message": text_message("hi")})
                conn = await _model(fake)
                sent_at_hang_up = conn.chunks_sent
                hung_up = anyio.current_time()
                tg.cancel_scope.cancel()
            closed, sent_at_close = await _closed_after(conn, hung_up)
            await anyio.sleep(0.3)
            listed = (await rpc(c, url, "ListTasks", {}))["result"]["tasks"]
    assert closed < 1.0
    assert sent_at_close - sent_at_hang_up <= 1  # at most the one token already on the wire
    assert conn.chunks_sent == sent_at_close < len(TOKENS)
    [task] = listed
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    assert task["status"]["message"]["metadata"]["reason"] == "hang-up"
    assert "were dropped" not in "".join(
        r.getMessage() for r in caplog.records if r.levelname == "WARNING")


@by_name
async def test_after_a_hang_up_and_a_cancel_task_the_next_send_completes(
        fw: Framework, model_env: Any) -> None:
    """One served object outlives its cancelled runs (BeeAI's cancel() aborts every later run
    of its executor: the adapter calls it on a copy per run)."""
    async with fake_chat_model(replying(fw, TOKENS), delay=0.01) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(rpc, c, url, "SendMessage", {"message": text_message("one")})
                await _model(fake)
                tg.cancel_scope.cancel()
            second = await rpc(c, url, "SendMessage", {
                "message": text_message("two"), "configuration": {"returnImmediately": True}})
            await _model(fake)
            await rpc(c, url, "CancelTask", {"id": second["result"]["task"]["id"]})
            fake.delay = 0.0
            third = (await rpc(c, url, "SendMessage", {"message": text_message("three")}))
    task = third["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert answer_text(task) == "".join(TOKENS)


@by_name
async def test_a_hang_up_leaves_a_concurrent_run_of_the_same_agent_to_complete(
        fw: Framework, model_env: Any) -> None:
    async with fake_chat_model(replying(fw, TOKENS), delay=0.01) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            other = await rpc(c, url, "SendMessage", {
                "message": text_message("other"), "configuration": {"returnImmediately": True}})
            await _model(fake)
            async with anyio.create_task_group() as tg:
                tg.start_soon(rpc, c, url, "SendMessage", {"message": text_message("one")})
                with anyio.fail_after(10):
                    while len(fake.connections) < 2 or fake.connections[1].chunks_sent < 3:
                        await anyio.sleep(0.002)
                tg.cancel_scope.cancel()
            with anyio.fail_after(15):
                while (task := await get(c, url, other["result"]["task"]["id"]))["status"][
                        "state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
                    await anyio.sleep(0.05)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert fake.connections[1].closed_by_client.is_set()


async def test_beeai_streams_hung_up_between_two_tokens_close_the_model_call(
        model_env: Any) -> None:
    """A hang-up that lands while BeeAI is between two chunks (here: a user's observer of
    every token, on BeeAI's root emitter, slower than the model; on a loaded machine: the
    chunks waiting in the socket buffer) leaves BeeAI's LiteLLM stream suspended at a yield
    in a reference cycle: without the adapter closing the run's suspended generators
    (adapters/run_generators.py) every such model call ran to its last token."""
    from beeai_framework.emitter import Emitter

    async def observer(data: Any, event: Any) -> None:
        await anyio.sleep(0.03)  # the model sends a token every 10 ms

    beeai = next(f for f in FRAMEWORKS if f.name == "beeai")
    long_reply = [f"t{i} " for i in range(300)]
    cleanup = Emitter.root().on(lambda event: event.name == "new_token", observer)
    calls = []
    try:
        async with fake_chat_model(replying(beeai, long_reply), delay=0.01) as fake:
            os.environ["MODEL_URL"] = fake.url
            app = A2AApp(from_executor(beeai.make()))
            async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
                for i in range(3):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_stream, c, url, f"hang up {i}")
                        with anyio.fail_after(10):
                            while len(fake.connections) <= i or \
                                    fake.connections[i].chunks_sent < 3:
                                await anyio.sleep(0.002)
                        tg.cancel_scope.cancel()
                    conn = fake.connections[i]
                    with anyio.move_on_after(5):  # the reply would take 3 s
                        await conn.closed_by_client.wait()
                    calls.append((conn.closed_by_client.is_set(), conn.chunks_sent))
                await anyio.sleep(0.3)
                listed = (await rpc(c, url, "ListTasks", {}))["result"]["tasks"]
    finally:
        cleanup()
    # (closed by the client before the reply's end, tokens sent) per hang-up
    assert [closed for closed, _ in calls] == [True] * 3, calls
    assert {t["status"]["state"] for t in listed} == {"TASK_STATE_CANCELED"}


async def _stream(c: httpx.AsyncClient, url: str, text: str) -> None:
    async with c.stream("POST", url, headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": text_message(text)}}) as r:
        async for _ in sse_events(r):
            pass


@by_name
async def test_a_detached_send_completes_after_its_caller_hangs_up(
        fw: Framework, model_env: Any) -> None:
    async with fake_chat_model(replying(fw, TOKENS), delay=0.002) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()), policy=DETACH)
        event = text_message("lead 42", metadata={"evoai_crm_event": "inactivity_action"})
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(rpc, c, url, "SendMessage", {"message": event})
                await _model(fake)
                tg.cancel_scope.cancel()
            with anyio.fail_after(10):
                while True:
                    [task] = (await rpc(c, url, "ListTasks", {}))["result"]["tasks"]
                    # submitted until the executor reports its start (CrewAI reports none:
                    # the adapter says working after a moment), then working, then the end
                    if task["status"]["state"] not in ("TASK_STATE_SUBMITTED",
                                                       "TASK_STATE_WORKING"):
                        break
                    await anyio.sleep(0.05)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert fake.connections[0].chunks_sent == len(fw.answer(TOKENS))


@by_name
async def test_cancel_task_stops_the_model(fw: Framework, model_env: Any) -> None:
    async with fake_chat_model(replying(fw, TOKENS), delay=0.02) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            first = (await rpc(c, url, "SendMessage", {
                "message": text_message("hi"), "configuration": {"returnImmediately": True}}))
            task_id = first["result"]["task"]["id"]
            conn = await _model(fake)
            asked = anyio.current_time()
            body = await rpc(c, url, "CancelTask", {"id": task_id})
            closed, _ = await _closed_after(conn, asked)
    assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert closed < 1.0 and conn.chunks_sent < len(TOKENS)


@by_name
async def test_a_resend_is_one_run(fw: Framework, model_env: Any) -> None:
    async with fake_chat_model(replying(fw, TOKENS), delay=0.001) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        message = text_message("once")
        answers: list[str] = []
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            async def one() -> None:
                body = await rpc(c, url, "SendMessage", {"message": message})
                answers.append(body["result"]["task"]["id"])

            async with anyio.create_task_group() as tg:
                tg.start_soon(one)
                tg.start_soon(one)
    assert answers[0] == answers[1]
    assert len(fake.requests) == 1


@by_name
async def test_concurrent_sends_to_one_agent_all_complete(fw: Framework, model_env: Any) -> None:
    """One served object, five callers at once (CrewAI's own server fails all but the first:
    one CrewAI agent refuses a second concurrent run; here each run has its own copy)."""
    async with fake_chat_model(replying(fw, TOKENS), delay=0.002) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        tasks: list[dict[str, Any]] = []
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            async def one(i: int) -> None:
                body = await rpc(c, url, "SendMessage", {"message": text_message(f"caller {i}")})
                tasks.append(body["result"]["task"])

            async with anyio.create_task_group() as tg:
                for i in range(5):
                    tg.start_soon(one, i)
    states = [(t["status"]["state"], answer_text(t)[:80]) for t in tasks]
    assert states == [("TASK_STATE_COMPLETED", "".join(TOKENS)[:80])] * 5, states
    assert len(fake.requests) == 5


@by_name
async def test_a_follow_up_in_the_context_reaches_the_model_with_the_first_turn(
        fw: Framework, model_env: Any) -> None:
    async with fake_chat_model(replying(fw, ["Noted."])) as fake:
        os.environ["MODEL_URL"] = fake.url
        app = A2AApp(from_executor(fw.make()))
        async with served(app) as url, httpx.AsyncClient(timeout=20) as c:
            first = await rpc(c, url, "SendMessage", {"message": text_message("my name is Ada")})
            context = first["result"]["task"]["contextId"]
            await rpc(c, url, "SendMessage", {
                "message": text_message("what is my name?", contextId=context)})
            await rpc(c, url, "SendMessage", {"message": text_message("a stranger")})
    second, third = json.dumps(fake.requests[1]), json.dumps(fake.requests[2])
    assert "what is my name?" in second
    assert ("my name is Ada" in second) is fw.keeps_history
    assert "my name is Ada" not in third  # another context: another conversation


@by_name
async def test_served_by_a_real_serve_process_with_the_frameworks_card(
        fw: Framework, model_env: Any) -> None:
    async with fake_chat_model(replying(fw, TOKENS)) as fake:
        os.environ["MODEL_URL"] = fake.url
        proc, url, log = await anyio.to_thread.run_sync(
            # importing a framework takes seconds of CPU: 22 s for BeeAI at load 16
            lambda: start("--agent", fw.target, "--backend", "asyncio", ready_timeout=90))
        try:
            async with httpx.AsyncClient(timeout=20) as c:
                card = (await c.get(url + ".well-known/agent-card.json")).json()
                body = await rpc(c, url, "SendMessage", {"message": text_message("hello")})
        finally:
            text = await anyio.to_thread.run_sync(stop, proc, log)
    assert card["name"] == fw.card_name
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert answer_text(task) == "".join(TOKENS)
    assert "Traceback" not in text, text
