"""pydantic-ai agents served unchanged through ``from_pydantic_ai``, over real HTTP (hypercorn).

pydantic-ai is asyncio-bound (its runs are asyncio tasks), so these tests run on asyncio only;
``test_trio_refuses_the_run`` shows what happens on trio. Models are offline: pydantic-ai's
``TestModel`` and ``FunctionModel``, and for the cancel tests a real ``OpenAIChatModel`` talking
HTTP to a slow fake endpoint on loopback (scoped_a2a.testing.fake_llm).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from scoped_a2a import A2AApp, A2AClient, RunContext, follow_trajectory
from scoped_a2a.adapters.pydantic_ai import MemoryHistory, from_pydantic_ai, recognises
from scoped_a2a.client.pages import LivePage
from scoped_a2a.testing.fake_llm import FakeChatModel, fake_chat_model, tool_then_text

from .adapter_helpers import Gate, get, sdk_send, send, status_text, trajectory, until_ended
from .helpers import rpc, served, sse_events, text_message
from .pydantic_ai_agents import (
    chunked,
    leaky_failure,
    prompt_recorder,
    remembering,
    stalling,
    structured,
    tool_user,
    with_deps,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # pydantic-ai runs on asyncio only (trio: see test_trio_refuses_the_run)


def app_of(agent: Agent, **kw: Any) -> A2AApp:
    return A2AApp(from_pydantic_ai(agent, **kw), grace=1.0)


def artifact(task: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [a for a in task.get("artifacts", []) if a.get("name") == name]
    return found


def reply_text(task: dict[str, Any]) -> str:
    return "".join(p["text"] for p in artifact(task, "reply")["parts"])


# --- what the adapter makes of a run ----------------------------------------------------------

async def test_blocking_send_completes_with_the_models_text_and_tool_events() -> None:
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel(custom_output_text="hello there friend"))

    @agent.tool_plain
    def lookup(city: str) -> str:
        return f"sunny in {city}"

    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "weather?")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert status_text(task) == "hello there friend"
        assert reply_text(task) == "hello there friend"
        events = await trajectory(client, url, task["id"])
        assert events == [
            {"type": "tool_call", "tool": "lookup", "args": {"city": "a"},
             "id": "pyd_ai_tool_call_id__lookup"},
            {"type": "tool_result", "tool": "lookup", "id": "pyd_ai_tool_call_id__lookup",
             "content": "sunny in a", "outcome": "success"},
        ]


async def test_streamed_text_arrives_as_ordered_artifact_chunks() -> None:
    app = app_of(chunked("Hel", "lo ", "wor", "ld"))
    req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
           "params": {"message": text_message("hi")}}
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as r:
            events = [e["result"] async for _, e in sse_events(r)]
        chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
        # Each chunk goes out as it comes; the end of the run closes the reply with an empty
        # last chunk (only then is it known that no more text follows).
        assert [c["artifact"]["parts"][0]["text"] for c in chunks] == [
            "Hel", "lo ", "wor", "ld", ""]
        assert [c.get("append", False) for c in chunks] == [False, True, True, True, True]
        assert [c.get("lastChunk", False) for c in chunks] == [False, False, False, False, True]
        assert {c["artifact"]["artifactId"] for c in chunks} == {
            chunks[0]["artifact"]["artifactId"]}
        assert {c["artifact"]["name"] for c in chunks} == {"reply"}
        final = events[-1]["statusUpdate"]["status"]
        assert final["state"] == "TASK_STATE_COMPLETED"
        assert final["message"]["parts"][0]["text"] == "Hello world"
        task = await get(client, url, events[0]["task"]["id"])
        assert reply_text(task) == "Hello world"


async def test_tool_calls_are_followed_live_while_the_run_is_in_flight() -> None:
    gate = Gate()
    async with served(app_of(tool_user(gate))) as url, A2AClient(url) as client:
        task = await client.send("weather in Paris?", return_immediately=True)
        seen: list[dict[str, Any]] = []
        call_seen = anyio.Event()
        states_at_call: list[str] = []

        async def sink(page: LivePage) -> None:
            for e in page.events:
                if e.kind == "trajectory":
                    seen.append(e.event["data"])
                    if e.event["data"]["type"] == "tool_call":
                        states_at_call.append(page.state.name if page.state else "")
                        call_seen.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow_trajectory, client, task.id, sink)
            with anyio.fail_after(10):
                await call_seen.wait()
            # The follower saw the call while the tool was still running (held by the gate).
            assert gate.entered.is_set() and not gate.ended
            assert states_at_call == ["WORKING"]
            assert [e["type"] for e in seen] == ["tool_call"]
            gate.release.set()
        assert seen == [
            {"type": "tool_call", "tool": "lookup", "args": {"city": "Paris"}, "id": "call-1"},
            {"type": "tool_result", "tool": "lookup", "id": "call-1", "content": "sunny in Paris",
             "outcome": "success"},
        ]
        ended = await client.get_task(task.id)
        assert ended.status.state.name == "COMPLETED"
        [reply] = [a for a in ended.artifacts if a.name == "reply"]
        # Text before the tool call and after it, in one reply; the status holds the output.
        assert "".join(p.text or "" for p in reply.parts) == "Let me look. Found: sunny in Paris"
        assert ended.status.message is not None
        assert ended.status.message.parts[0].text == "Found: sunny in Paris"


async def test_a_follow_up_in_the_same_context_sees_the_earlier_turns() -> None:
    history = MemoryHistory()
    async with served(app_of(remembering(), history=history)) as url, \
            httpx.AsyncClient(timeout=10) as client:
        first = await send(client, url, "my name is Ada")
        assert status_text(first) == "my name is Ada"
        second = (await rpc(client, url, "SendMessage", {"message": text_message(
            "what is my name?", contextId=first["contextId"])}))["result"]["task"]
        assert second["id"] != first["id"] and second["contextId"] == first["contextId"]
        assert status_text(second) == "my name is Ada | what is my name?"
        other = await send(client, url, "who am I?")  # a new context starts afresh
        assert status_text(other) == "who am I?"
        assert len(history) == 2


async def test_history_is_bounded_and_keeps_the_first_turn() -> None:
    history = MemoryHistory(max_contexts=2, max_turns=3)
    for i in range(5):
        await history.append(("", "c1"), [f"turn {i}"])
    assert await history.load(("", "c1")) == ["turn 0", "turn 3", "turn 4"]
    await history.append(("", "c2"), ["x"])
    await history.load(("", "c1"))  # c1 used more recently than c2
    await history.append(("", "c3"), ["y"])
    assert len(history) == 2
    assert await history.load(("", "c2")) == []
    assert await history.load(("", "c1")) == ["turn 0", "turn 3", "turn 4"]


async def test_histories_of_different_callers_are_apart(tmp_path: Path) -> None:
    from scoped_a2a.server.auth import Authenticator
    from scoped_a2a.server.auth.api_keys import ApiKeys

    keys = tmp_path / "keys.txt"
    keys.write_text("alice:key-a\nbob:key-b\n")
    auth = Authenticator([ApiKeys(keys)])
    app = A2AApp(from_pydantic_ai(remembering()), authenticate=auth, grace=1.0)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        a = (await rpc(client, url, "SendMessage", {"message": text_message(
            "alice's secret", contextId="shared")}, headers={"X-API-Key": "key-a"}))
        assert status_text(a["result"]["task"]) == "alice's secret"
        b = (await rpc(client, url, "SendMessage", {"message": text_message(
            "hello", contextId="shared")}, headers={"X-API-Key": "key-b"}))
        assert status_text(b["result"]["task"]) == "hello"


async def test_structured_output_becomes_a_data_part() -> None:
    async with served(app_of(structured())) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "weather in Paris")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert artifact(task, "output")["parts"] == [{"data": {"city": "Paris", "celsius": 21}}]
        assert "reply" not in {a.get("name") for a in task["artifacts"]}
        # The output tool is how pydantic-ai returns the output, not a tool call of the agent.
        assert await trajectory(client, url, task["id"]) == []
        v03 = await rpc(client, url, "tasks/get", {"id": task["id"]}, version=None)
        [part] = v03["result"]["artifacts"][0]["parts"]
        assert part == {"kind": "data", "data": {"city": "Paris", "celsius": 21}}


async def test_file_and_data_parts_reach_the_model_as_pydantic_ai_content() -> None:
    import base64

    from pydantic_ai import BinaryContent, DocumentUrl, ImageUrl

    seen: list[object] = []
    message = text_message("describe these")
    message["parts"] += [
        {"raw": base64.b64encode(b"\x89PNG").decode(), "mediaType": "image/png"},
        {"url": "https://files.example/report.pdf", "mediaType": "application/pdf"},
        {"url": "https://files.example/cat.jpg", "mediaType": "image/jpeg"},
        {"data": {"order": "A-1"}},
    ]
    async with served(app_of(prompt_recorder(seen))) as url, \
            httpx.AsyncClient(timeout=10) as client:
        sent = await rpc(client, url, "SendMessage", {"message": message})
        assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    [content] = seen
    assert isinstance(content, list)
    text, raw, doc, image, data = content
    assert text == "describe these" and data == '{"order": "A-1"}'
    assert isinstance(raw, BinaryContent)
    assert (raw.data, raw.media_type) == (b"\x89PNG", "image/png")
    assert isinstance(doc, DocumentUrl) and doc.url == "https://files.example/report.pdf"
    assert isinstance(image, ImageUrl) and image.media_type == "image/jpeg"


async def test_deps_hook_builds_deps_from_the_run_context() -> None:
    async def deps(ctx: RunContext) -> str:
        await anyio.sleep(0)
        return f"deps for {ctx.text}"

    async with served(app_of(with_deps(), deps=deps)) as url, \
            httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "carol")
        assert status_text(task) == '{"whoami":"deps for carol"}'
    async with served(app_of(with_deps(), deps=lambda ctx: "sync")) as url, \
            httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "dave")
        assert status_text(task) == '{"whoami":"sync"}'


async def test_a_failing_tool_fails_the_task_without_leaking_its_text() -> None:
    async with served(app_of(leaky_failure())) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "connect")
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        text = status_text(task)
        assert text.startswith("RuntimeError (error id ") and "hunter2" not in text
        assert (await trajectory(client, url, task["id"]))[0]["type"] == "tool_call"


# --- cancellation -------------------------------------------------------------------------------

async def test_hanging_up_an_interactive_stream_cancels_the_run() -> None:
    gate = Gate()
    app = app_of(stalling(gate))
    req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
           "params": {"message": text_message("go")}}
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as r:
            async for _, event in sse_events(r):
                if "task" in event["result"]:
                    task_id = event["result"]["task"]["id"]
                if "artifactUpdate" in event["result"]:
                    break  # the first chunk came: hang up with the model mid-stream
        with anyio.fail_after(5):
            await gate.entered.wait()
        task = await until_ended(client, url, task_id)
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert task["status"]["message"]["metadata"]["reason"] == "hang-up"
        assert gate.ended == ["cancelled"]
        assert app.runner.active == 0


async def test_a_detached_run_completes_after_its_caller_hangs_up() -> None:
    gate = Gate()
    async with served(app_of(stalling(gate))) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go", configuration={"returnImmediately": True})
        with anyio.fail_after(5):
            await gate.entered.wait()
        # The caller's request is over; the run goes on and finishes once released.
        gate.release.set()
        ended = await until_ended(client, url, task["id"])
        assert ended["status"]["state"] == "TASK_STATE_COMPLETED"
        assert reply_text(ended) == "thinking done"
        assert gate.ended == ["released"]


async def test_cancel_task_cancels_the_run() -> None:
    gate = Gate()
    async with served(app_of(stalling(gate))) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go", configuration={"returnImmediately": True})
        with anyio.fail_after(5):
            await gate.entered.wait()
        canceled = (await rpc(client, url, "CancelTask", {"id": task["id"]}))["result"]
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        ended = await until_ended(client, url, task["id"])
        assert ended["status"]["message"]["metadata"]["reason"] == "CancelTask"
        with anyio.fail_after(5):
            while not gate.ended:
                await anyio.sleep(0.01)
        assert gate.ended == ["cancelled"]


@asynccontextmanager
async def slow_llm() -> AsyncIterator[FakeChatModel]:
    """A model that streams "one " and then holds its reply open (a call in flight)."""
    async with fake_chat_model(lambda body: ["one "], hold=True) as llm:
        yield llm


def openai_agent(llm: FakeChatModel) -> Agent:
    model = OpenAIChatModel("fake-model", provider=OpenAIProvider(base_url=llm.url,
                                                                  api_key="test"))
    return Agent(model, name="remote")


@pytest.mark.parametrize("how", ["hang-up", "CancelTask"])
async def test_cancelling_closes_the_models_http_connection(how: str) -> None:
    async with slow_llm() as llm, served(app_of(openai_agent(llm))) as url, \
            httpx.AsyncClient(timeout=10) as client:
        req = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
               "params": {"message": text_message("go")}}
        async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as r:
            async for _, event in sse_events(r):
                if "task" in event["result"]:
                    task_id = event["result"]["task"]["id"]
                if "artifactUpdate" in event["result"]:
                    break  # "one " arrived; the model's response is now stalled
            with anyio.fail_after(5):
                await llm.in_flight.wait()
            [conn] = llm.connections
            assert not conn.closed_by_client.is_set()
            if how == "CancelTask":
                async with httpx.AsyncClient(timeout=10) as other:
                    await rpc(other, url, "CancelTask", {"id": task_id})
        # Leaving the stream hangs up (and after a CancelTask, the stream has ended anyway).
        with anyio.fail_after(1):
            await conn.closed_by_client.wait()
        task = await until_ended(client, url, task_id)
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert task["status"]["message"]["metadata"]["reason"] == how
        assert reply_text(task) == "one "


async def test_a_deadline_cancels_the_run() -> None:
    from scoped_a2a.protocol.deadline import BUDGET_KEY

    gate = Gate()
    async with served(app_of(stalling(gate))) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go", metadata={BUDGET_KEY: 300})
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert task["status"]["message"]["metadata"]["reason"] == "deadline"
        assert gate.ended == ["cancelled"]


async def test_shutdown_cancels_a_detached_run_after_its_grace_and_closes_the_model_call() -> None:
    async with slow_llm() as llm:
        app = A2AApp(from_pydantic_ai(openai_agent(llm)), grace=0.3)
        async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
            task = await send(client, url, "go", configuration={"returnImmediately": True})
            with anyio.fail_after(5):
                await llm.in_flight.wait()
        # served() has shut the server down: the run outlived the grace period.
        [conn] = llm.connections
        assert conn.closed_by_client.is_set()
    ended, _ = await app.store.get(task["id"])
    assert ended.status.state.name == "CANCELED"
    assert ended.status.message is not None
    assert ended.status.message.metadata == {"reason": "shutdown"}


async def test_the_a2a_sdk_client_talks_to_the_adapted_agent() -> None:
    async with served(app_of(chunked("from ", "pydantic-ai"))) as url, \
            httpx.AsyncClient(timeout=10) as h:
        task = await sdk_send(h, url, "hi")
        assert task.status.message.parts[0].text == "from pydantic-ai"
        assert "".join(p.text for p in task.artifacts[0].parts) == "from pydantic-ai"


# --- the card, recognition, trio -------------------------------------------------------------

def test_card_fields_come_from_the_agent_and_can_be_overridden() -> None:
    gate = Gate()
    fields = from_pydantic_ai(tool_user(gate)).card_fields()
    assert fields["name"] == "looker"
    # Its instructions ("You look things up.") are its private prompt: not on the public card.
    assert fields["description"] == "A pydantic-ai agent served by scoped-a2a."
    assert "look things up" not in str(fields)
    assert [s["id"] for s in fields["skills"]] == ["looker"]
    over = from_pydantic_ai(tool_user(gate), name="Weather", description="Says the weather.",
                            skills=[{"id": "wx", "name": "wx", "description": "d",
                                     "tags": []}]).card_fields()
    assert (over["name"], over["description"], [s["id"] for s in over["skills"]]) == (
        "Weather", "Says the weather.", ["wx"])
    described = Agent(None, name="d", description="Own words.", instructions="secret prompt")
    assert from_pydantic_ai(described).card_fields()["description"] == "Own words."


def test_recognises_pydantic_ai_agents_only() -> None:
    assert recognises(chunked("x"))
    assert not recognises(object()) and not recognises(A2AApp)
    with pytest.raises(TypeError, match="needs a pydantic-ai Agent"):
        from_pydantic_ai(object())


def test_recognising_does_not_import_pydantic_ai() -> None:
    import subprocess

    code = ("import sys; from scoped_a2a.adapters.pydantic_ai import recognises; "
            "print(recognises(object()), 'pydantic_ai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_refuses_the_run() -> None:
    async with served(app_of(chunked("never"))) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "hi")
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert "reply" not in {a.get("name") for a in task.get("artifacts", [])}
        text = status_text(task)
        assert "--backend asyncio" in text or text.startswith("UnsupportedBackend (error id")


# --- the example ---------------------------------------------------------------------------------

async def test_the_example_answers_through_its_tool_against_a_fake_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/pydantic_ai_agent served as its docstring says, its model a fake endpoint."""
    from .test_cli import start, stop

    async with fake_chat_model(tool_then_text(
            "get_order_status", {"order_id": "A-1001"},
            ["Order A-1001 ", "has shipped ", "with DHL."])) as llm:
        monkeypatch.setenv("MODEL_URL", llm.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        proc, url, log = await anyio.to_thread.run_sync(lambda: start(
            "--backend", "asyncio", "--agent", "examples.pydantic_ai_agent.agent:assistant"))
        try:
            async with httpx.AsyncClient(timeout=20) as client:
                task = await send(client, url, "Where is my order A-1001?")
                events = await trajectory(client, url, task["id"])
        finally:
            err = await anyio.to_thread.run_sync(stop, proc, log)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", err
    assert status_text(task) == "Order A-1001 has shipped with DHL."
    assert reply_text(task) == "Order A-1001 has shipped with DHL."
    assert [(e["type"], e["tool"]) for e in events] == [
        ("tool_call", "get_order_status"), ("tool_result", "get_order_status")]
    assert events[0]["args"] == {"order_id": "A-1001"}
    assert events[1]["content"] == {"status": "shipped", "carrier": "DHL", "eta": "2 days"}
    # The model's second request carried the tool's result and the agent's instructions.
    first, second = (c.body for c in llm.connections)
    assert first is not None and second is not None
    assert first["model"] == "gpt-4o-mini" and first["stream"] is True
    assert second["messages"][-1]["role"] == "tool"
    assert "shipped" in second["messages"][-1]["content"]
    assert "order" in second["messages"][0]["content"]
