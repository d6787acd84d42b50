"""Google ADK agents served unchanged through ``from_adk``, over real HTTP (hypercorn).

ADK is asyncio-bound (its runner drives the agent in asyncio tasks), so these tests run on
asyncio only; ``test_trio_refuses_the_run`` shows what happens on trio. Models are offline:
``ScriptedLlm`` (tests/adk_models.py) streams scripted parts, and for the cancel tests the
example's ``ChatCompletionsModel`` makes a real HTTP call to a slow fake chat-completions
endpoint on loopback (``scoped_a2a.testing.fake_llm``), which sees when its connection is
closed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from examples.adk_agent.agent import ChatCompletionsModel
from google.adk.agents import LlmAgent

from scoped_a2a import A2AApp, A2AClient, follow_trajectory
from scoped_a2a.adapters.adk import from_adk, recognises
from scoped_a2a.adapters.base import UnsupportedBackend
from scoped_a2a.client.pages import LivePage
from scoped_a2a.testing.fake_llm import Chunk, ToolCall, fake_chat_model, last_role

from .adapter_helpers import get, sdk_send, send, status_text, trajectory, until_ended
from .adk_models import GATE, Boom, Call, Final, ModelError, ScriptedLlm, request_texts
from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # ADK runs on asyncio only (trio: see test_trio_refuses_the_run)


def lookup(city: str) -> dict[str, str]:
    """The weather in a city."""
    return {"city": city, "sky": "sunny"}


def scripted(*script: list[Any], name: str = "helper") -> LlmAgent:
    return LlmAgent(name=name, description="Helps.", model=ScriptedLlm(script=list(script)),
                    tools=[lookup])


def probe(agent: LlmAgent) -> Any:
    model = agent.model
    assert isinstance(model, ScriptedLlm)
    return model.probe


def app_of(agent: Any, **kw: Any) -> A2AApp:
    return A2AApp(from_adk(agent, **kw), grace=1.0)


def artifact_texts(task: dict[str, Any]) -> list[str]:
    return ["".join(p.get("text", "") for p in a["parts"]) for a in task.get("artifacts", [])]


STREAM = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}


async def stream_events(client: httpx.AsyncClient, url: str, req: dict[str, Any]
                        ) -> list[dict[str, Any]]:
    async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as r:
        return [e["result"] async for _, e in sse_events(r)]


# --- what the adapter makes of a run ----------------------------------------------------------

async def test_blocking_send_completes_with_the_agents_answer() -> None:
    agent = scripted(["Hello", ", ", "world"])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "hi")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert status_text(task) == "Hello, world"
        [artifact] = task["artifacts"]
        assert artifact["name"] == "helper"
        assert artifact_texts(task) == ["Hello, world"]
        assert request_texts(probe(agent).requests[0])[-1] == ("user", "hi")


async def test_streamed_text_arrives_as_ordered_chunks_without_repeats() -> None:
    app = app_of(scripted(["Hel", "lo ", "wor", "ld"]))
    req = {**STREAM, "params": {"message": text_message("hi")}}
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as r:
            events = [e["result"] async for _, e in sse_events(r)]
        chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
        # Each partial event is a chunk as it comes; ADK's aggregated event at the end of the
        # model's response closes the artifact with what is left of it (nothing here).
        assert [c["artifact"]["parts"][0]["text"] for c in chunks] == [
            "Hel", "lo ", "wor", "ld", ""]
        assert [c.get("append", False) for c in chunks] == [False, True, True, True, True]
        assert [c.get("lastChunk", False) for c in chunks] == [False, False, False, False, True]
        assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
        final = events[-1]["statusUpdate"]["status"]
        assert final["state"] == "TASK_STATE_COMPLETED"
        assert final["message"]["parts"][0]["text"] == "Hello world"
        task = await get(client, url, events[0]["task"]["id"])
        assert artifact_texts(task) == ["Hello world"]


async def test_an_aggregate_that_differs_from_its_chunks_replaces_them() -> None:
    agent = scripted(["Hel", "lo", Final("Hi, rewritten.")], ["Hel", Final("Hello!")])
    req = {**STREAM, "params": {"message": text_message("hi")}}
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        events = await stream_events(client, url, req)
        chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
        assert [(c["artifact"]["parts"][0]["text"], c.get("append", False)) for c in chunks] == [
            ("Hel", False), ("lo", True), ("Hi, rewritten.", False)]
        task = await get(client, url, events[0]["task"]["id"])
        assert artifact_texts(task) == ["Hi, rewritten."]  # replaced, not appended to
        assert chunks[-1]["lastChunk"] and len({c["artifact"]["artifactId"] for c in chunks}) == 1
        # An aggregate that extends its chunks sends only the rest.
        extended = await send(client, url, "again")
        assert artifact_texts(extended) == ["Hello!"]


async def test_a_run_config_without_streaming_gives_whole_responses() -> None:
    from google.adk.agents import RunConfig
    from google.adk.agents.run_config import StreamingMode

    tuned = from_adk(scripted(["a", "b"]), run_config=RunConfig(max_llm_calls=7))
    assert tuned.run_config.streaming_mode is StreamingMode.SSE  # unless it says otherwise
    assert tuned.run_config.max_llm_calls == 7
    with pytest.raises(ValueError, match="BIDI"):
        from_adk(scripted(["x"]), run_config=RunConfig(streaming_mode=StreamingMode.BIDI))
    agent = scripted(["Hel", "lo"])
    whole = from_adk(agent, run_config=RunConfig(streaming_mode=StreamingMode.NONE))
    req = {**STREAM, "params": {"message": text_message("hi")}}
    async with served(A2AApp(whole, grace=1.0)) as url, httpx.AsyncClient(timeout=10) as client:
        events = await stream_events(client, url, req)
    [chunk] = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert chunk["artifact"]["parts"] == [{"text": "Hello"}] and chunk.get("lastChunk")
    assert events[-1]["statusUpdate"]["status"]["message"]["parts"][0]["text"] == "Hello"


async def test_tool_calls_are_trajectory_events_read_live() -> None:
    agent = scripted(["Let me look. ", Call("lookup", {"city": "Paris"}, "c7")],
                     [GATE, "Sunny ", "in Paris."])
    seen: list[tuple[str | None, dict[str, Any]]] = []

    async def sink(page: LivePage) -> None:
        state = page.state.name if page.state else None
        seen.extend((state, e.event["data"]) for e in page.events if e.kind == "trajectory")
        if len(seen) == 2:
            probe(agent).release.set()  # both seen while the run waits in its second model call

    async with served(app_of(agent)) as url, A2AClient(url) as client, \
            httpx.AsyncClient(timeout=10) as h:
        task = await send(h, url, "weather?", configuration={"returnImmediately": True})
        with anyio.fail_after(10):
            await follow_trajectory(client, task["id"], sink, poll_interval=0.02)
        assert [s for s, _ in seen] == ["WORKING", "WORKING"]
        assert [d for _, d in seen] == [
            {"type": "tool_call", "tool": "lookup", "args": {"city": "Paris"}, "id": "c7",
             "agent": "helper"},
            {"type": "tool_result", "tool": "lookup", "content": {"city": "Paris",
                                                                  "sky": "sunny"},
             "id": "c7", "agent": "helper"},
        ]
        ended = await until_ended(h, url, task["id"])
        assert ended["status"]["state"] == "TASK_STATE_COMPLETED"
        assert status_text(ended) == "Sunny in Paris."
        # One artifact per model response: the words before the tool call, then the answer.
        assert artifact_texts(ended) == ["Let me look. ", "Sunny in Paris."]
        # The model's second call saw the tool's result.
        [result] = [p.function_response for c in probe(agent).requests[1].contents
                    for p in c.parts or [] if p.function_response]
        assert (result.id, result.response) == ("c7", {"city": "Paris", "sky": "sunny"})


def test_tool_data_on_the_trajectory_is_json_and_bounded() -> None:
    from datetime import datetime

    from scoped_a2a.adapters.trajectory import MAX_EVENT_CHARS
    from scoped_a2a.adapters.trajectory import bounded as jsonable

    class Thing:
        def __repr__(self) -> str:
            return "<thing>"

    assert jsonable({"when": datetime(2026, 1, 2), "thing": Thing()}) == {
        "when": "2026-01-02T00:00:00", "thing": "<thing>"}
    big = jsonable({"text": "x" * 9000})
    assert big == {"truncated": True, "chars": 9012,
                   "preview": '{"text": "' + "x" * (MAX_EVENT_CHARS - 10)}


async def test_one_session_per_context_and_caller(tmp_path: Path) -> None:
    from scoped_a2a.server.auth import Authenticator
    from scoped_a2a.server.auth.api_keys import ApiKeys

    keys = tmp_path / "keys.txt"
    keys.write_text("alice:key-a\nbob:key-b\n")
    agent = scripted(["Noted."])
    adapted = from_adk(agent)
    app = A2AApp(adapted, authenticate=Authenticator([ApiKeys(keys)]), grace=1.0)
    alice, bob = {"X-API-Key": "key-a"}, {"X-API-Key": "key-b"}
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        first = await send(client, url, "my name is Ada", headers=alice)
        ctx = first["contextId"]
        await send(client, url, "what is my name?", message={"contextId": ctx}, headers=alice)
        await send(client, url, "a new conversation", headers=alice)
        await send(client, url, "whose context?", message={"contextId": ctx}, headers=bob)
        await send(client, url, "in a tenant", message={"contextId": ctx}, headers=alice,
                   tenant="acme")
    requests = [request_texts(r) for r in probe(agent).requests]
    assert requests[1] == [("user", "my name is Ada"), ("model", "Noted."),
                           ("user", "what is my name?")]
    assert requests[2] == [("user", "a new conversation")]
    assert requests[3] == [("user", "whose context?")]  # Bob cannot read Alice's session
    assert requests[4] == [("user", "in a tenant")]  # nor Alice hers from another tenant
    listed = await adapted.runner.session_service.list_sessions(app_name="helper", user_id="alice")
    assert ctx in {s.id for s in listed.sessions}


async def test_the_turns_of_one_session_run_in_order() -> None:
    agent = scripted([GATE, "first"], ["second"])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        one = await send(client, url, "one", configuration={"returnImmediately": True})
        with anyio.fail_after(5):
            await probe(agent).entered.wait()
        two = await send(client, url, "two", message={"contextId": one["contextId"]},
                         configuration={"returnImmediately": True})
        with anyio.fail_after(5):
            while (await get(client, url, two["id"]))["status"]["state"] != "TASK_STATE_WORKING":
                await anyio.sleep(0.01)
        await anyio.sleep(0.3)  # unordered, the second turn's model call would be made by now
        assert len(probe(agent).requests) == 1
        probe(agent).release.set()
        assert status_text(await until_ended(client, url, one["id"])) == "first"
        assert status_text(await until_ended(client, url, two["id"])) == "second"
    assert request_texts(probe(agent).requests[1]) == [
        ("user", "one"), ("model", "first"), ("user", "two")]


async def test_tools_see_the_caller_and_the_request_metadata() -> None:
    from google.adk.tools import ToolContext

    def whoami(tool_context: ToolContext) -> dict[str, Any]:
        """Who is asking."""
        config = tool_context.run_config
        assert config is not None and config.custom_metadata is not None
        return {"user": tool_context.user_id, "metadata": config.custom_metadata["a2a_metadata"]}

    agent = LlmAgent(name="helper", model=ScriptedLlm(script=[[Call("whoami", {})], ["ok"]]),
                     tools=[whoami])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "who am I?", metadata={"crm": "lead-7"})
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        [_, result] = await trajectory(client, url, task["id"])
    # Without authentication the caller is anonymous: ADK's own executor's user id for it.
    assert result["content"] == {"user": f"A2A_USER_{task['contextId']}",
                                 "metadata": {"crm": "lead-7"}}


async def test_a_follow_up_after_a_cancelled_tool_call_continues_the_session() -> None:
    entered, ended = anyio.Event(), []

    async def stall() -> dict[str, str]:
        """Takes forever."""
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.append("cancelled")
        return {}

    agent = LlmAgent(name="helper", model=ScriptedLlm(
        script=[[Call("stall", {}, "c9")], ["fine"]]), tools=[stall])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go", configuration={"returnImmediately": True})
        with anyio.fail_after(5):
            await entered.wait()
        await rpc(client, url, "CancelTask", {"id": task["id"]})
        assert ended == ["cancelled"]  # the tool's own await was cancelled
        assert [e["type"] for e in await trajectory(client, url, task["id"])] == ["tool_call"]
        again = await send(client, url, "again", message={"contextId": task["contextId"]})
        assert again["status"]["state"] == "TASK_STATE_COMPLETED"
        assert status_text(again) == "fine"
    contents = probe(agent).requests[1].contents
    assert request_texts(probe(agent).requests[1]) == [("user", "go"), ("user", "again")]
    # The call the cancel left unanswered is not sent to the model again (ADK drops it), so
    # a provider that insists on an answer to every call does not reject the conversation.
    assert not any(p.function_call for c in contents for p in c.parts or [])


async def test_a_failing_model_fails_the_task_without_leaking_its_text() -> None:
    agent = scripted(["Starting", Boom("password=hunter2")])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go")
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        text = status_text(task)
        assert re.fullmatch(r"RuntimeError \(error id [0-9a-f]+\); the server log has the "
                            r"details", text), text
        assert "hunter2" not in str(task)


async def test_a_model_error_fails_the_task_with_its_code_only() -> None:
    agent = scripted(["Partial ", "answer", ModelError("SAFETY", "blocked: user 42's data")])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go")
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert status_text(task) == ("the model answered with an error (SAFETY); the server "
                                     "log has its message")
        assert "user 42" not in str(task)


# --- cancellation -------------------------------------------------------------------------------

async def test_a_detached_run_completes_after_its_caller_hangs_up() -> None:
    agent = scripted([GATE, "done ", "at last"])
    async with served(app_of(agent)) as url:
        async with httpx.AsyncClient(timeout=10) as client:
            task = await send(client, url, "go", configuration={"returnImmediately": True})
            with anyio.fail_after(5):
                await probe(agent).entered.wait()
        # The caller's connection is closed; the run goes on and finishes once released.
        probe(agent).release.set()
        async with httpx.AsyncClient(timeout=10) as client:
            ended = await until_ended(client, url, task["id"])
        assert ended["status"]["state"] == "TASK_STATE_COMPLETED"
        assert status_text(ended) == "done at last"
        assert probe(agent).ended == ["released"]


async def test_a_crm_event_survives_its_callers_hang_up() -> None:
    """The failure this project exists for: a CRM fires a system event as a blocking send and
    hangs up at once; a metadata rule detaches the run, so the ADK agent still writes its
    message (instead of being cancelled with the hang-up)."""
    from scoped_a2a import RunPolicy

    agent = scripted([GATE, "Hi Ada, ", "still interested?"])
    policy = RunPolicy({"evoai_crm_event": frozenset({"inactivity_action"})})
    app = A2AApp(from_adk(agent), policy=policy, grace=1.0)
    req = {**STREAM, "params": {"message": text_message(
        "write a re-engagement message", metadata={"evoai_crm_event": "inactivity_action"})}}
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as r:
            async for _, event in sse_events(r):
                task_id = event["result"]["task"]["id"]
                break  # hang up as soon as the task exists
        with anyio.fail_after(5):
            await probe(agent).entered.wait()
        probe(agent).release.set()
        ended = await until_ended(client, url, task_id)
    assert ended["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(ended) == "Hi Ada, still interested?"
    assert probe(agent).ended == ["released"]


async def test_cancel_task_cancels_the_model_call() -> None:
    agent = scripted(["Thinking", GATE, "never"])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go", configuration={"returnImmediately": True})
        with anyio.fail_after(5):
            await probe(agent).entered.wait()
        canceled = (await rpc(client, url, "CancelTask", {"id": task["id"]}))["result"]
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert canceled["status"]["message"]["metadata"]["reason"] == "CancelTask"
        assert probe(agent).ended == ["cancelled"]
        assert artifact_texts(await get(client, url, task["id"])) == ["Thinking"]


async def test_a_tool_that_ignores_cancellation_is_abandoned_after_the_grace() -> None:
    import asyncio

    entered, release, ended = anyio.Event(), anyio.Event(), []

    async def stubborn() -> dict[str, str]:
        """Will not stop."""
        entered.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:  # swallowed, every time it comes
                if not ended:
                    ended.append("ignored a cancel")
        ended.append("returned")
        return {}

    agent = LlmAgent(name="helper", model=ScriptedLlm(script=[[Call("stubborn", {})], ["x"]]),
                     tools=[stubborn])
    app = A2AApp(from_adk(agent, cancel_grace=0.2), grace=1.0)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "go", configuration={"returnImmediately": True})
        with anyio.fail_after(5):
            await entered.wait()
        canceled = (await rpc(client, url, "CancelTask", {"id": task["id"]}))["result"]
        # Recorded and its slot freed although ADK's task still runs the tool.
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert ended == ["ignored a cancel"] and app.runner.active == 0
        release.set()
        with anyio.fail_after(5):
            while ended[-1] != "returned":
                await anyio.sleep(0.01)
        assert (await get(client, url, task["id"]))["status"]["state"] == "TASK_STATE_CANCELED"


def remote_agent(url: str) -> LlmAgent:
    return LlmAgent(name="remote", model=ChatCompletionsModel(model="fake", base_url=url))


@pytest.mark.parametrize("how", ["hang-up", "CancelTask"])
async def test_cancelling_closes_the_models_http_connection(how: str) -> None:
    async with fake_chat_model(lambda body: ["one ", "two "], hold=True) as llm, \
            served(app_of(remote_agent(llm.url))) as url, httpx.AsyncClient(timeout=10) as client:
        req = {**STREAM, "params": {"message": text_message("go")}}
        async with client.stream("POST", url, json=req, headers={"A2A-Version": "1.0"}) as r:
            texts = []
            async for _, event in sse_events(r):
                if "task" in event["result"]:
                    task_id = event["result"]["task"]["id"]
                if "artifactUpdate" in event["result"]:
                    texts.append(event["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"])
                    if len(texts) == 2:
                        break  # "one two " arrived; the model's response is now held open
            [conn] = llm.connections
            assert llm.in_flight.is_set() and not conn.closed_by_client.is_set()
            if how == "CancelTask":
                async with httpx.AsyncClient(timeout=10) as other:
                    await rpc(other, url, "CancelTask", {"id": task_id})
        # Leaving the stream hangs up (after a CancelTask the run is already over).
        with anyio.fail_after(1):
            await conn.closed_by_client.wait()
        task = await until_ended(client, url, task_id)
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert task["status"]["message"]["metadata"]["reason"] == how
        assert artifact_texts(task) == ["one two "]
        assert len(llm.requests) == 1 and llm.requests[0]["stream"] is True


async def test_a_deadline_cancels_the_run() -> None:
    from scoped_a2a.protocol.deadline import BUDGET_KEY

    agent = scripted(["Ready."], ["Thinking", GATE, "never"])
    async with served(app_of(agent)) as url, httpx.AsyncClient(timeout=10) as client:
        # A first run pays for ADK's lazy imports (near a second here), which must not eat
        # the budget of the run under test.
        assert status_text(await send(client, url, "warm up")) == "Ready."
        task = await send(client, url, "go", metadata={BUDGET_KEY: 500})
        assert probe(agent).entered.is_set()
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert task["status"]["message"]["metadata"]["reason"] == "deadline"
        assert probe(agent).ended == ["cancelled"]


async def test_shutdown_cancels_a_detached_run_after_its_grace_and_closes_the_model_call(
) -> None:
    async with fake_chat_model(lambda body: ["one "], hold=True) as llm:
        app = app_of(remote_agent(llm.url))
        app.grace = 0.3
        async with served(app, grace=0.3) as url, httpx.AsyncClient(timeout=10) as client:
            task = await send(client, url, "go", configuration={"returnImmediately": True})
            with anyio.fail_after(5):
                await llm.in_flight.wait()
        # served() has shut the server down: the run outlived the grace period.
        assert [c.closed_by_client.is_set() for c in llm.connections] == [True]
    ended, _ = await app.store.get(task["id"])
    assert ended.status.state.name == "CANCELED"
    assert ended.status.message is not None
    assert ended.status.message.metadata == {"reason": "shutdown"}


async def test_the_a2a_sdk_client_talks_to_the_adapted_agent() -> None:
    async with served(app_of(scripted(["from ", "ADK"]))) as url, \
            httpx.AsyncClient(timeout=10) as h:
        task = await sdk_send(h, url, "hi")
        assert task.status.message.parts[0].text == "from ADK"
        assert "".join(p.text for p in task.artifacts[0].parts) == "from ADK"


# --- the card, recognition, trio -------------------------------------------------------------

def test_card_fields_come_from_the_agent_and_can_be_overridden() -> None:
    team = LlmAgent(name="team", description="A team.", model=ScriptedLlm(script=[[]]), sub_agents=[
        scripted(["x"], name="researcher"),
        LlmAgent(name="writer", description="Writes it up.", model=ScriptedLlm(script=[[]]))])
    fields = from_adk(team).card_fields()
    assert (fields["name"], fields["description"]) == ("team", "A team.")
    assert fields["skills"] == [
        {"id": "researcher", "name": "researcher", "description": "Helps.", "tags": ["llm"]},
        {"id": "writer", "name": "writer", "description": "Writes it up.", "tags": ["llm"]},
    ]
    alone = from_adk(scripted(["x"])).card_fields()
    assert [s["id"] for s in alone["skills"]] == ["helper"]
    over = from_adk(team, name="Team", description="Ours.", skills=[
        {"id": "s", "name": "S", "description": "d", "tags": []}]).card_fields()
    assert (over["name"], over["description"], [s["id"] for s in over["skills"]]) == (
        "Team", "Ours.", ["s"])


async def test_the_served_card_is_the_agents() -> None:
    async with served(app_of(scripted(["x"]))) as url, httpx.AsyncClient(timeout=10) as client:
        card = (await client.get(url + ".well-known/agent-card.json")).json()
    assert (card["name"], card["description"]) == ("helper", "Helps.")
    assert card["skills"] == [
        {"id": "helper", "name": "helper", "description": "Helps.", "tags": ["llm"]}]
    assert card["capabilities"]["streaming"] is True  # the server's own fields stay


def test_recognises_adk_agents_only() -> None:
    assert recognises(scripted(["x"]))
    assert not recognises(object()) and not recognises(LlmAgent)
    with pytest.raises(TypeError, match="takes a Google ADK agent"):
        from_adk(object())  # type: ignore[arg-type]


def test_serve_agent_adapts_the_examples_bare_adk_agent() -> None:
    from scoped_a2a.adapters.adk import AdkAgent
    from scoped_a2a.agent_loading import load_agent

    loaded = load_agent("examples.adk_agent.agent:root_agent", backend="asyncio")
    assert isinstance(loaded.agent, AdkAgent)
    assert loaded.card["name"] == "weather_agent"
    assert [s["id"] for s in loaded.card["skills"]] == ["weather_agent"]
    with pytest.raises(SystemExit, match=r"^Google ADK runs on asyncio only, not trio: serve "
                                         r"it with --backend asyncio$"):
        load_agent("examples.adk_agent.agent:root_agent", backend="trio")


def test_recognising_does_not_import_adk() -> None:
    code = ("import sys; from scoped_a2a.adapters.adk import recognises; "
            "print(recognises(object()), 'google.adk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_refuses_the_run() -> None:
    adapted = from_adk(scripted(["never"]))
    with pytest.raises(UnsupportedBackend, match=r"^Google ADK runs on asyncio only, not trio: "
                                                 r"serve it with --backend asyncio$"):
        await adapted(None)  # type: ignore[arg-type]
    async with served(A2AApp(adapted, grace=1.0)) as url, \
            httpx.AsyncClient(timeout=10) as client:
        task = await send(client, url, "hi")
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert not task.get("artifacts")
        text = status_text(task)
        assert "--backend asyncio" in text or text.startswith("UnsupportedBackend (error id")


# --- the example, end to end ------------------------------------------------------------------

def weather(body: dict[str, Any]) -> list[Chunk]:
    """The fake model: first words and a call to get_weather; once the tool's result is in the
    conversation, text quoting it (so the test sees the tool really ran)."""
    if last_role(body) != "tool":
        return ["Let me check. ", ToolCall("get_weather", {"city": "Paris"}, "call_1")]
    found = json.loads(body["messages"][-1]["content"])["weather"]
    return ["In Paris it is ", found, "."]


async def test_the_example_serves_its_agent_against_a_fake_endpoint() -> None:
    async with fake_chat_model(weather) as llm:
        env = {**os.environ, "MODEL_URL": llm.url, "MODEL_NAME": "fake-model",
               "MODEL_API_KEY": "sk-test",
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        async with await anyio.open_process(
                [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--backend",
                 "asyncio", "--agent", "examples.adk_agent.agent:agent"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL) as proc:
            assert proc.stderr is not None
            log = ""
            try:
                with anyio.fail_after(60):
                    while not (found := re.search(r"serving on (http://\S+)", log)):
                        log += (await proc.stderr.receive()).decode()
                url = found.group(1)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_drain, proc.stderr)  # the server logs every run
                    async with httpx.AsyncClient(timeout=30) as client:
                        task = await send(client, url, "What is the weather in Paris?")
                    tg.cancel_scope.cancel()
            finally:
                proc.terminate()
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert status_text(task) == "In Paris it is sunny, 21 °C."
        assert artifact_texts(task) == ["Let me check. ", "In Paris it is sunny, 21 °C."]
        first, second = llm.requests
        assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
        assert first["messages"][0]["role"] == "system"
        assert first["messages"][-1] == {"role": "user",
                                         "content": "What is the weather in Paris?"}
        assert second["messages"][-1]["role"] == "tool"
        assert "authorization: bearer sk-test" in llm.connections[0].head.lower()


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass
