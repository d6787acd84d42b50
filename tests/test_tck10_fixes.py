"""What the conformance kit's 1.0-dev branch found, fixed, over real hypercorn on asyncio and trio
(docs/conformance.md): HTTP+JSON answers are ``application/json``; a part of a media type the
card does not accept is ContentTypeNotSupportedError before any task exists; an agent that
returns a Message answers with that message (a direct reply); a 1.0-only card; a resent stream
of an ended task does not replay its states backwards; the kit's scenario agent.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.agents.tck import tck_agent
from scoped_a2a.protocol.ids import new_id
from scoped_a2a.protocol.types import Message, Part, Role
from scoped_a2a.runtime.context import RunContext

from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio

V1 = {"A2A-Version": "1.0"}
V03_CARD_FIELDS = ("url", "preferredTransport", "protocolVersion",
                   "supportsAuthenticatedExtendedCard")


def tck_message(prefix: str, text: str = "hi") -> dict[str, Any]:
    return text_message(text, messageId=f"{prefix}-{new_id()}")


async def test_rest_answers_and_errors_are_application_json() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient(base_url=url,
                                                                     headers=V1) as http:
        ok = await http.post("/message:send", json={"message": text_message("hi")})
        missing = await http.get("/tasks/nope")
        wrong_type = await http.post("/message:send", content=b"{}",
                                     headers={"content-type": "text/plain"})
        unknown_route = await http.get("/nothing-here")
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/json"
    for r, status in ((missing, 404), (wrong_type, 415), (unknown_route, 404)):
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/json"  # spec §11.1, §11.6
        assert r.json()["error"]["code"] == status


async def test_a_part_the_card_does_not_accept_is_refused_before_any_task() -> None:
    card = {"defaultInputModes": ["text/plain"],
            "skills": [{"id": "img", "name": "Images", "description": "reads images",
                        "tags": ["img"], "inputModes": ["image/*"]}]}
    image = {"raw": base64.b64encode(b"\x89PNG").decode(), "mediaType": "image/png",
             "filename": "a.png"}
    pdf = {"raw": base64.b64encode(b"%PDF").decode(), "mediaType": "application/pdf"}
    data = {"data": {"k": 1}}  # a data part is application/json, not declared here
    async with served(A2AApp(demo_agent, card=card)) as url, httpx.AsyncClient() as http:
        for part, accepted in ((image, True), (pdf, False), (data, False)):
            msg = text_message("look", parts=[{"text": "look"}, part])
            body = await rpc(http, url, "SendMessage", {"message": msg})
            if accepted:  # a skill's inputModes count as well as the defaults
                assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            else:
                assert body["error"]["code"] == -32005, body
                assert "does not accept" in body["error"]["message"]
        msg = text_message("look", parts=[pdf])
        r = await http.post(url + "message:send", json={"message": msg}, headers=V1)
        # 1.0.1 §5.4: ContentTypeNotSupportedError is 400 (1.0.0 said 415).
        assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert r.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        listed = await rpc(http, url, "ListTasks", {})
    assert len(listed["result"]["tasks"]) == 1  # only the accepted send made a task


async def direct(ctx: RunContext) -> Message:
    return Message(message_id=new_id(), role=Role.AGENT, parts=[Part(text=f"re: {ctx.text}")])


async def test_an_agent_returning_a_message_answers_with_it() -> None:
    async with served(A2AApp(direct)) as url, httpx.AsyncClient() as http:
        v1 = await rpc(http, url, "SendMessage", {"message": text_message("a")})
        rest = await http.post(url + "message:send", json={"message": text_message("b")},
                               headers=V1)
        v03 = await rpc(http, url, "message/send", {"message": text_message("c", v1=False)},
                        version=None)
        async with http.stream("POST", url, headers=V1, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": text_message("d")}}) as r:
            streamed = [data["result"] async for _, data in sse_events(r)]
    message = v1["result"]["message"]
    assert "task" not in v1["result"] and message["role"] == "ROLE_AGENT"
    assert message["parts"] == [{"text": "re: a"}] and "taskId" not in message
    assert message["contextId"]
    assert rest.json()["message"]["parts"] == [{"text": "re: b"}]
    assert v03["result"]["kind"] == "message" and v03["result"]["parts"][0]["text"] == "re: c"
    # A stream has shown the task before the agent answers: it ends completed with the reply.
    end = streamed[-1]["statusUpdate"]["status"]
    assert end["state"] == "TASK_STATE_COMPLETED" and end["message"]["parts"] == [
        {"text": "re: d"}]


async def test_the_card_without_the_0_3_fields() -> None:
    async with (served(A2AApp(demo_agent)) as both, served(A2AApp(demo_agent,
                card_1_0_only=True)) as only, httpx.AsyncClient() as http):
        default = (await http.get(both + ".well-known/agent-card.json")).json()
        one_oh = (await http.get(only + ".well-known/agent-card.json")).json()
        # The 0.3 dialect is still served: only the card changed.
        v03 = await rpc(http, only, "message/send", {"message": text_message("x", v1=False)},
                        version=None)
    assert all(f in default for f in V03_CARD_FIELDS)
    assert not any(f in one_oh for f in V03_CARD_FIELDS)
    def bindings(card: dict[str, Any]) -> list[tuple[str, str]]:
        return [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]]

    assert bindings(one_oh) == bindings(default)  # the 0.3 interface is still listed
    assert v03["result"]["status"]["state"] == "completed"


async def test_a_resent_stream_of_an_ended_task_is_its_end_alone() -> None:
    msg = text_message("once")
    call = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": msg}}
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as http:
        runs = []
        for _ in range(2):
            async with http.stream("POST", url, json=call, headers=V1) as r:
                runs.append([data["result"] async for _, data in sse_events(r)])
    first, again = runs
    assert first[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # The same message again is the same send: its task, which has ended, and nothing after.
    assert len(again) == 1 and again[0]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again[0]["task"]["id"] == first[0]["task"]["id"]


async def test_the_kits_scenario_agent() -> None:
    async with served(A2AApp(tck_agent)) as url, httpx.AsyncClient() as http:
        async def send(prefix: str, **extra: Any) -> dict[str, Any]:
            body = await rpc(http, url, "SendMessage", {"message": {**tck_message(prefix),
                                                                    **extra}})
            result: dict[str, Any] = body["result"]
            return result

        done = (await send("tck-complete-task"))["task"]
        file_ = (await send("tck-artifact-file"))["task"]
        url_ = (await send("tck-artifact-file-url"))["task"]
        data = (await send("tck-artifact-data"))["task"]
        reply = await send("tck-message-response")
        rejected = (await send("tck-reject-task"))["task"]
        asked = (await send("tck-input-required"))["task"]
        # The answer to the question runs the scenario of its own messageId.
        follow = (await send("tck-artifact-text", taskId=asked["id"]))["task"]
        other = (await send("something-else"))["task"]
    assert done["status"]["message"]["parts"] == [{"text": "Hello from TCK"}]
    assert file_["artifacts"][0]["parts"] == [{"raw": base64.b64encode(b"tck").decode(),
                                               "mediaType": "text/plain",
                                               "filename": "output.txt"}]
    assert url_["artifacts"][0]["parts"][0]["url"] == "https://example.com/output.txt"
    assert data["artifacts"][0]["parts"] == [{"data": {"key": "value", "count": 42}}]
    assert reply["message"]["parts"] == [{"text": "Direct message response"}]
    assert rejected["status"]["state"] == "TASK_STATE_REJECTED"
    assert rejected["status"]["message"]["parts"] == [{"text": "rejected"}]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert follow["status"]["state"] == "TASK_STATE_COMPLETED"
    assert follow["artifacts"][-1]["parts"] == [{"text": "Generated text content"}]
    assert other["status"]["message"]["parts"][0]["text"].startswith(
        "Unhandled messageId prefix: something-else")


async def test_the_kits_streamed_scenarios() -> None:
    async with served(A2AApp(tck_agent)) as url, httpx.AsyncClient() as http:
        async def stream(prefix: str) -> list[dict[str, Any]]:
            call = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                    "params": {"message": tck_message(prefix)}}
            async with http.stream("POST", url, json=call, headers=V1) as r:
                return [data["result"] async for _, data in sse_events(r)]

        basic = await stream("tck-stream-001")
        chunked = await stream("tck-stream-artifact-chunked")
    kinds = [next(iter(e)) for e in basic]
    assert kinds == ["task", "statusUpdate", "statusUpdate", "artifactUpdate", "statusUpdate"]
    assert basic[3]["artifactUpdate"]["artifact"]["parts"] == [{"text": "Stream hello from TCK"}]
    chunks = [e["artifactUpdate"] for e in chunked if "artifactUpdate" in e]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["chunk-1 ", "chunk-2"]
    assert chunks[0]["artifact"]["artifactId"] == chunks[1]["artifact"]["artifactId"]
    assert chunks[1]["lastChunk"] is True and chunks[1]["append"] is True
    assert chunked[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_input_modes_match_types_not_parameters() -> None:
    from scoped_a2a.server.input_modes import InputModes

    modes = InputModes(["text/plain", "image/*", "audio"])
    assert modes.accepts("Text/Plain; charset=utf-8") and modes.accepts("image/webp")
    assert modes.accepts("audio/ogg") and not modes.accepts("application/pdf")
    assert InputModes.from_card({}).any  # a card that declares nothing refuses nothing


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_card_1_0_only(backend: str) -> None:
    """``serve --card-1-0-only`` as an operator runs it: the served card has no 0.3 fields."""
    from .test_cli import start, stop

    proc, url, log = start("--backend", backend, "--card-1-0-only")
    try:
        card = httpx.get(url + ".well-known/agent-card.json", timeout=5).json()
    finally:
        stop(proc, log)
    assert card["supportedInterfaces"] and not any(f in card for f in V03_CARD_FIELDS)


async def test_the_conformance_agent_takes_any_part() -> None:
    """The main-branch kit's conformance agent declares ``*/*`` and so takes a binary part
    (the kit's ``test_binary_data_handling``), which the default card refuses."""
    from scoped_a2a.agents.conformance import conformance_agent

    part = {"raw": base64.b64encode(b"\x00\x01").decode(), "mediaType": "application/octet-stream"}
    msg = text_message("bytes", parts=[{"text": "bytes"}, part])
    async with (served(A2AApp(conformance_agent)) as url, served(A2AApp(demo_agent)) as demo,
                httpx.AsyncClient() as http):
        card = (await http.get(url + ".well-known/agent-card.json")).json()
        taken = await rpc(http, url, "SendMessage", {"message": msg})
        refused = await rpc(http, demo, "SendMessage", {"message": msg})
    assert card["name"] == "conformance_agent" and card["defaultInputModes"] == ["*/*"]
    assert taken["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert refused["error"]["code"] == -32005
