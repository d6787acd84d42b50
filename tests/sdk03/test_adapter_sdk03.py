"""a2a-sdk 0.3 executors (pydantic types), unchanged, served by scoped-a2a's one a2a-sdk runner.

Over real HTTP through hypercorn, with a2a-sdk 0.3 installed (the generation is chosen by what is
installed). The same semantics as the 1.x generation's tests: a hang-up cancels an interactive
run and calls the executor's ``cancel`` (with the current task, as a2a-sdk's own CancelTask
does), a detached run survives its caller, CancelTask works, a resend is one run, a follow-up
to input-required runs ``execute`` again, rule-breaking events fail the run naming the rule. On
trio: one line.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.adapters.a2a_sdk import from_executor, generation, recognises

from ..adapter_helpers import get, status_text
from ..helpers import rpc, served, sse_events, text_message
from .executors import (
    EchoExecutor,
    Journal,
    RaisingExecutor,
    StatusBeforeTaskExecutor,
    StreamingExecutor,
)

pytestmark = [pytest.mark.anyio, pytest.mark.sdk03]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


async def send(client: httpx.AsyncClient, url: str, text: str, **params: Any) -> dict[str, Any]:
    message = params.pop("message", None) or text_message(text)
    body = await rpc(client, url, "SendMessage", {"message": message, **params})
    assert "result" in body, body
    task: dict[str, Any] = body["result"]["task"]
    return task


async def wait_state(client: httpx.AsyncClient, url: str, task_id: str,
                     *states: str) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            task = await get(client, url, task_id)
            if task["status"]["state"] in states:
                return task
            await anyio.sleep(0.02)


async def _running(journal: Journal) -> str:
    assert journal.running is not None
    with anyio.fail_after(10):
        await journal.running.wait()
    return journal.started[-1]


def test_the_installed_generation_is_chosen() -> None:
    assert generation() == "0.3"
    assert from_executor(EchoExecutor()).generation == "0.3"


@asyncio_only
async def test_a_direct_message_reply_answers_with_that_message() -> None:
    async with served(A2AApp(from_executor(EchoExecutor()))) as url, httpx.AsyncClient() as c:
        body = await rpc(c, url, "SendMessage", {"message": text_message("hi")})
    reply = body["result"]["message"]
    assert "".join(p["text"] for p in reply["parts"]) == "echo: hi"
    assert reply["role"] == "ROLE_AGENT" and "taskId" not in reply


@asyncio_only
async def test_a_stream_arrives_whole_with_chunks_a_file_and_no_repeated_status() -> None:
    app = A2AApp(from_executor(StreamingExecutor()))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        events = []
        async with c.stream("POST", url, headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": text_message("hello there")}}) as r:
            async for _, data in sse_events(r):
                events.append(data["result"])
        chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
        reply = [ch for ch in chunks if ch["artifact"]["artifactId"] == "reply"]
        assert "".join(ch["artifact"]["parts"][0]["text"] for ch in reply) == "you said hello there"
        assert [ch.get("append", False) for ch in reply] == [False] + [True] * (len(reply) - 1)
        assert reply[-1]["lastChunk"] is True
        [file] = [ch["artifact"] for ch in chunks if ch["artifact"].get("name") == "file"]
        assert file["parts"][0]["filename"] == "data.bin"
        assert file["parts"][0]["mediaType"] == "application/octet-stream"
        states = [e["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e]
        # a2a-sdk's own server streams working then completed for this executor: the
        # executor's bare start_work() is the start (the runtime leaves it to the executor).
        assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        task = await get(c, url, events[0]["task"]["id"])
        import base64
        raw = next(a for a in task["artifacts"] if a.get("name") == "file")["parts"][0]["raw"]
        assert base64.b64decode(raw) == b"\x00\x01binary"


@asyncio_only
async def test_a_0_3_caller_gets_the_0_3_shapes() -> None:
    async with served(A2AApp(from_executor(StreamingExecutor()))) as url, \
            httpx.AsyncClient(timeout=10) as c:
        body = await rpc(c, url, "message/send", {"message": text_message("old", v1=False)},
                         version=None)
    task = body["result"]
    assert (task["kind"], task["status"]["state"]) == ("task", "completed")
    assert "".join(p["text"] for p in task["artifacts"][0]["parts"]) == "you said old"


@asyncio_only
async def test_input_required_then_the_follow_up_runs_execute_again() -> None:
    journal = Journal()
    app = A2AApp(from_executor(StreamingExecutor(journal)))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        asked = await send(c, url, "ask")
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert status_text(asked) == "which?"
        answer = text_message("blue", taskId=asked["id"], contextId=asked["contextId"])
        done = await send(c, url, "", message=answer)
        assert (done["id"], done["status"]["state"]) == (asked["id"], "TASK_STATE_COMPLETED")
        reply = next(a for a in done["artifacts"] if a["artifactId"] == "reply")
        assert "".join(p["text"] for p in reply["parts"]) == "you said blue"
    assert journal.started == [asked["id"], asked["id"]]


@asyncio_only
async def test_reject_and_raise_end_the_task_without_the_exceptions_text() -> None:
    async with served(A2AApp(from_executor(StreamingExecutor()))) as url, \
            httpx.AsyncClient() as c:
        task = await send(c, url, "reject")
    assert (task["status"]["state"], status_text(task)) == ("TASK_STATE_REJECTED", "not my job")
    async with served(A2AApp(from_executor(RaisingExecutor()))) as url, \
            httpx.AsyncClient() as c:
        task = await send(c, url, "x")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task).startswith("RuntimeError (error id ")
    assert "secret" not in status_text(task)


@asyncio_only
async def test_a_status_before_the_task_makes_the_task_as_0_3_does() -> None:
    """0.3's server makes a task from its first status update (1.x's refuses: its own test)."""
    async with served(A2AApp(from_executor(StatusBeforeTaskExecutor()))) as url, \
            httpx.AsyncClient() as c:
        task = await send(c, url, "x")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["parts"][0]["text"] for m in task["history"] if m["role"] == "ROLE_AGENT"] == [
        "starting"]


@asyncio_only
async def test_a_hang_up_cancels_execute_and_calls_cancel_without_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="scoped_a2a.adapters")
    journal = Journal(running=asyncio.Event())
    app = A2AApp(from_executor(StreamingExecutor(journal, slow=0.5)))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, c, url, "a long answer")
            task_id = await _running(journal)
            tg.cancel_scope.cancel()  # the caller hangs up
        task = await wait_state(c, url, task_id, "TASK_STATE_CANCELED")
        assert task["status"]["message"]["metadata"]["reason"] == "hang-up"
    assert journal.execute_cancelled == [task_id]
    assert journal.cancelled == [task_id]
    assert journal.cancel_saw_task == [True]  # cancel() gets the task, as a2a-sdk's does
    assert app.runner.active == 0
    # Its own canceled, enqueued from cancel(), is expected: dropped and counted, at DEBUG.
    adapter_logs = [r for r in caplog.records if r.name == "scoped_a2a.adapters"]
    assert [r.levelname for r in adapter_logs if "dropped" in r.getMessage()] == ["DEBUG"]


@asyncio_only
async def test_a_detached_run_completes_after_its_caller_hangs_up() -> None:
    journal = Journal(running=asyncio.Event())
    policy = RunPolicy(detach_metadata={"evoai_crm_event": frozenset({"inactivity_action"})})
    app = A2AApp(from_executor(StreamingExecutor(journal, slow=0.05)), policy=policy)
    event = text_message("fire and forget", metadata={"evoai_crm_event": "inactivity_action"})
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(send, c, url, "", message=event))
            task_id = await _running(journal)
            tg.cancel_scope.cancel()
        task = await wait_state(c, url, task_id, "TASK_STATE_COMPLETED", "TASK_STATE_CANCELED")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert journal.cancelled == []


@asyncio_only
async def test_cancel_task_cancels_execute_and_calls_cancel() -> None:
    journal = Journal(running=asyncio.Event())
    app = A2AApp(from_executor(StreamingExecutor(journal, slow=0.5)))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        first = await send(c, url, "cancel me", configuration={"returnImmediately": True})
        await _running(journal)
        body = await rpc(c, url, "CancelTask", {"id": first["id"]})
        assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert body["result"]["status"]["message"]["metadata"]["reason"] == "CancelTask"
    assert journal.cancelled == [first["id"]]
    assert journal.execute_cancelled == [first["id"]]


@asyncio_only
async def test_a_resend_is_one_run() -> None:
    journal = Journal()
    app = A2AApp(from_executor(StreamingExecutor(journal, slow=0.05)))
    message = text_message("once")
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        answers: list[dict[str, Any]] = []

        async def one() -> None:
            answers.append(await send(c, url, "", message=message))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            tg.start_soon(one)
    assert [a["id"] for a in answers] == [answers[0]["id"]] * 2
    assert journal.started == [answers[0]["id"]]


@asyncio_only
async def test_the_executor_sees_the_related_tasks_and_the_card_comes_from_its_own() -> None:
    from a2a.types import AgentCapabilities, AgentCard, AgentSkill

    card = AgentCard(name="Echoer", description="Says it back.", url="http://elsewhere/",
                     version="1.2", capabilities=AgentCapabilities(), default_input_modes=["text"],
                     default_output_modes=["text"],
                     skills=[AgentSkill(id="echo", name="echo", description="e", tags=[])])
    journal = Journal()
    app = A2AApp(from_executor(StreamingExecutor(journal), card=card))
    async with served(app) as url, httpx.AsyncClient() as c:
        first = await send(c, url, "one")
        second = await send(c, url, "", message=text_message(
            "two", referenceTaskIds=[first["id"], "no-such-task"]))
        assert second["status"]["state"] == "TASK_STATE_COMPLETED"
        served_card = (await c.get(url + ".well-known/agent-card.json")).json()
    assert journal.related == [[], [first["id"]]]
    assert journal.users[0] == (False, "")
    assert (served_card["name"], served_card["description"]) == ("Echoer", "Says it back.")
    assert [s["id"] for s in served_card["skills"]] == ["echo"]
    assert "elsewhere" not in str(served_card)  # the URL is the server's own


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_a_run_fails_saying_to_use_asyncio() -> None:
    async with served(A2AApp(from_executor(EchoExecutor()))) as url, httpx.AsyncClient() as c:
        task = await send(c, url, "hi")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task) == ("a2a-sdk's AgentExecutor runs on asyncio only, not trio: serve "
                                 "it with --backend asyncio")


def test_recognises_a_0_3_executor_and_refuses_other_objects() -> None:
    assert recognises(EchoExecutor())
    assert not recognises(object())
    with pytest.raises(TypeError, match="AgentExecutor"):
        from_executor(object())


def _shape(event: dict[str, Any]) -> tuple[str, ...]:
    """One streamed 0.3 event as compared across servers: its kind, state, whether its status
    carries a message, the artifact's name."""
    if event["kind"] == "artifact-update":
        return event["kind"], event["artifact"].get("name", "")
    status = event["status"]
    return event["kind"], status["state"], "message" if status.get("message") else "bare"


def _native_app(executor: Any) -> Any:
    """a2a-sdk 0.3's own JSON-RPC server (its DefaultRequestHandler and in-memory store)."""
    from a2a.server.apps import A2AStarletteApplication
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import AgentCapabilities, AgentCard, AgentSkill

    card = AgentCard(name="native", description="a2a-sdk's server", url="http://native/",
                     version="1", capabilities=AgentCapabilities(streaming=True),
                     default_input_modes=["text"], default_output_modes=["text"],
                     skills=[AgentSkill(id="s", name="s", description="s", tags=[])])
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore())
    return A2AStarletteApplication(agent_card=card, http_handler=handler).build()


async def _stream_shapes(c: httpx.AsyncClient, url: str) -> list[tuple[str, ...]]:
    async with c.stream("POST", url, json={
            "jsonrpc": "2.0", "id": 1, "method": "message/stream",
            "params": {"message": text_message("hello there", v1=False)}}) as r:
        return [_shape(data["result"]) async for _, data in sse_events(r)]


@asyncio_only
@pytest.mark.parametrize("make", [StatusBeforeTaskExecutor, StreamingExecutor],
                         ids=["first-working-with-a-message", "bare-start-work"])
async def test_a_stream_is_the_native_servers_event_for_event(make: Any) -> None:
    """An executor whose first working carries a message gets no bare working of the
    runtime's before it; a bare start_work() is not repeated: as on a2a-sdk's own server."""
    native = httpx.ASGITransport(_native_app(make()))
    async with httpx.AsyncClient(transport=native, base_url="http://native") as c:
        theirs = await _stream_shapes(c, "http://native/")
    async with served(A2AApp(from_executor(make()))) as url, \
            httpx.AsyncClient(timeout=10) as c:
        ours = await _stream_shapes(c, url)
    # Our streams open with the task (A2A 1.0's rule); a2a-sdk 0.3's with whatever the
    # executor enqueued first: the updates after it are compared.
    assert ours[0][:2] == ("task", "submitted")
    ours = ours[1:]
    theirs = [e for e in theirs if e[0] != "task"]
    assert ours == theirs, f"\nours:   {ours}\nnative: {theirs}"
    assert ours[0][0] == "status-update"
