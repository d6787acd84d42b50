"""a2a-sdk 1.x AgentExecutors, unchanged, served by scoped-a2a (scoped_a2a.adapters.a2a_sdk).

Over real HTTP through hypercorn. The executors (tests/sdk_executors.py) are written the way
a2a-sdk's docs write them; the adapter gives them this runtime's semantics: a hang-up cancels an
interactive run and calls the executor's ``cancel``, a detached run survives its caller,
CancelTask works, rule-breaking events fail the run with a reason naming the rule, and an
executor that ignores cancellation cannot hold its run. a2a-sdk is asyncio-bound: on trio the
adapter refuses, in one line.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.adapters.a2a_sdk import from_executor, recognises
from scoped_a2a.protocol.types import TaskState

from .adapter_helpers import get, status_text
from .helpers import rpc, served, sse_events, text_message
from .sdk_executors import (
    EchoExecutor,
    Journal,
    MessageAfterTaskExecutor,
    RaisingExecutor,
    StatusBeforeTaskExecutor,
    StreamingExecutor,
    StubbornExecutor,
)

pytestmark = pytest.mark.anyio
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


@asyncio_only
async def test_a_direct_message_reply_answers_the_caller_with_that_message() -> None:
    async with served(A2AApp(from_executor(EchoExecutor()))) as url, httpx.AsyncClient() as c:
        body = await rpc(c, url, "SendMessage", {"message": text_message("hi")})
    reply = body["result"]["message"]
    assert "task" not in body["result"]
    assert "".join(p["text"] for p in reply["parts"]) == "echo: hi"
    assert reply["role"] == "ROLE_AGENT" and "taskId" not in reply


@asyncio_only
async def test_a_task_updater_stream_arrives_in_order_with_chunks_and_a_file() -> None:
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
        files = [ch["artifact"] for ch in chunks if ch["artifact"].get("name") == "file"]
        assert files[0]["parts"][0]["filename"] == "data.bin"
        assert files[0]["parts"][0]["mediaType"] == "application/octet-stream"
        last = events[-1]["statusUpdate"]["status"]
        assert last["state"] == "TASK_STATE_COMPLETED"
        task = await get(c, url, events[0]["task"]["id"])
        # The stored task holds the artifacts whole: the chunks appended into one.
        reply_artifact = next(a for a in task["artifacts"] if a["artifactId"] == "reply")
        assert "".join(p["text"] for p in reply_artifact["parts"]) == "you said hello there"
        import base64
        raw = next(a for a in task["artifacts"] if a.get("name") == "file")["parts"][0]["raw"]
        assert base64.b64decode(raw) == b"\x00\x01binary"


@asyncio_only
async def test_input_required_then_the_follow_up_runs_execute_again_on_the_same_task() -> None:
    journal = Journal()
    app = A2AApp(from_executor(StreamingExecutor(journal)))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        asked = await send(c, url, "ask")
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert status_text(asked) == "which?"
        assert app.runner.parked == 1  # waiting for input, not cancelled for lack of holders
        answer = text_message("blue", taskId=asked["id"], contextId=asked["contextId"])
        done = await send(c, url, "", message=answer)
        assert done["id"] == asked["id"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        task = await get(c, url, asked["id"])
        reply = next(a for a in task["artifacts"] if a["artifactId"] == "reply")
        assert "".join(p["text"] for p in reply["parts"]) == "you said blue"
    assert journal.started == [asked["id"], asked["id"]]
    assert app.runner.parked == 0


@asyncio_only
async def test_reject_ends_the_task_rejected_with_the_executors_message() -> None:
    async with served(A2AApp(from_executor(StreamingExecutor()))) as url, \
            httpx.AsyncClient() as c:
        task = await send(c, url, "reject")
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert status_text(task) == "not my job"


@asyncio_only
async def test_an_executor_that_raises_fails_the_task_without_its_text(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoped_a2a")
    async with served(A2AApp(from_executor(RaisingExecutor()))) as url, \
            httpx.AsyncClient() as c:
        task = await send(c, url, "x")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = status_text(task)
    assert text.startswith("RuntimeError (error id ") and "secret" not in text
    assert task["status"]["message"]["metadata"]["errorId"] in caplog.text


@asyncio_only
@pytest.mark.parametrize(("executor", "rule"), [
    (StatusBeforeTaskExecutor, "TaskStatusUpdateEvent came before the Task"),
    (MessageAfterTaskExecutor, "a Message in task mode"),
])
async def test_events_out_of_order_fail_the_run_naming_the_rule(
        executor: type, rule: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoped_a2a")
    async with served(A2AApp(from_executor(executor()))) as url, httpx.AsyncClient() as c:
        task = await send(c, url, "x")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert rule in status_text(task)
    assert task["status"]["message"]["metadata"]["reason"] == "invalid-event"
    assert "reason=invalid-event" in caplog.text


async def _running(journal: Journal) -> str:
    assert journal.running is not None
    with anyio.fail_after(10):
        await journal.running.wait()
    return journal.started[-1]


@asyncio_only
async def test_a_hang_up_cancels_execute_and_calls_the_executors_cancel() -> None:
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
    assert app.runner.active == 0


@asyncio_only
async def test_a_detached_run_completes_after_its_caller_hangs_up() -> None:
    """The CRM case: a blocking send whose metadata matches the detach rule, then a hang-up."""
    journal = Journal(running=asyncio.Event())
    policy = RunPolicy(detach_metadata={"evoai_crm_event": frozenset({"inactivity_action"})})
    app = A2AApp(from_executor(StreamingExecutor(journal, slow=0.05)), policy=policy)
    event = text_message("fire and forget", metadata={"evoai_crm_event": "inactivity_action"})
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(send, c, url, "", message=event))
            task_id = await _running(journal)
            tg.cancel_scope.cancel()  # the CRM's background job hangs up
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


@asyncio_only
async def test_an_executor_that_ignores_cancellation_is_abandoned_and_its_slot_freed(
        caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(running=asyncio.Event())
    stubborn = StubbornExecutor(journal, lifetime=2.0)
    app = A2AApp(from_executor(stubborn, cancel_grace=0.3, cancel_timeout=0.3))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        first = await send(c, url, "x", configuration={"returnImmediately": True})
        await _running(journal)
        started = anyio.current_time()
        body = await rpc(c, url, "CancelTask", {"id": first["id"]})
        elapsed = anyio.current_time() - started
        assert body["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert elapsed < 1.5  # the bound, not the executor's 2 s lifetime
        assert app.runner.active == 0  # the run's slot is free
        assert not stubborn.finished.is_set()  # ...while the executor still runs, abandoned
        assert "ignored cancellation" in caplog.text
        with anyio.fail_after(5):
            await stubborn.finished.wait()
        # Its late "completed" changed nothing: terminal states never change.
        task = await get(c, url, first["id"])
        assert task["status"]["state"] == "TASK_STATE_CANCELED"


@asyncio_only
async def test_the_executor_sees_the_caller_and_the_related_tasks() -> None:
    journal = Journal()
    app = A2AApp(from_executor(StreamingExecutor(journal)))
    async with served(app) as url, httpx.AsyncClient() as c:
        first = await send(c, url, "one")
        second = await send(c, url, "", message=text_message(
            "two", referenceTaskIds=[first["id"], "no-such-task"]))
        assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    assert journal.related == [[], [first["id"]]]
    assert journal.users[0] == (False, "", "")  # anonymous: no authentication configured


@asyncio_only
async def test_shutdown_cancels_a_run_past_grace_and_records_it() -> None:
    journal = Journal(running=asyncio.Event())
    app = A2AApp(from_executor(StreamingExecutor(journal, slow=0.5)))
    async with served(app, grace=0.2) as url, httpx.AsyncClient(timeout=10) as c:
        first = await send(c, url, "long", configuration={"returnImmediately": True})
        await _running(journal)
    task, _ = await app.store.get(first["id"])
    assert task.status.state is TaskState.CANCELED
    assert task.status.message is not None
    assert (task.status.message.metadata or {})["reason"] == "shutdown"
    assert journal.cancelled == [first["id"]]


@asyncio_only
async def test_the_official_sdk_client_talks_to_an_adapted_executor() -> None:
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    req = SendMessageRequest(message=Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="sdk")]))
    async with served(A2AApp(from_executor(StreamingExecutor()))) as url, \
            httpx.AsyncClient(timeout=10) as h, \
            await create_client(url, ClientConfig(streaming=True, httpx_client=h)) as client:
        events = [e async for e in client.send_message(req)]
    finals = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert finals[-1] == 3  # TASK_STATE_COMPLETED
    texts = [p.text for e in events if e.HasField("artifact_update")
             for p in e.artifact_update.artifact.parts if p.text]
    assert "".join(texts) == "you said sdk"


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_a_run_fails_saying_to_use_asyncio() -> None:
    async with served(A2AApp(from_executor(EchoExecutor()))) as url, httpx.AsyncClient() as c:
        task = await send(c, url, "hi")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task) == ("a2a-sdk's AgentExecutor runs on asyncio only, not trio: serve "
                                 "it with --backend asyncio")


def test_recognises_an_executor_and_refuses_other_objects() -> None:
    assert recognises(EchoExecutor())
    assert not recognises(object())
    with pytest.raises(TypeError, match="AgentExecutor"):
        from_executor(object())


def _shape(event: dict[str, Any]) -> tuple[str, ...]:
    """One streamed event as compared across servers: its kind, state, whether its status
    carries a message, the artifact's name."""
    (kind, body), = event.items()
    if kind == "artifactUpdate":
        return kind, body["artifact"].get("name", "")
    status = body.get("status", {})
    return kind, status.get("state", ""), "message" if status.get("message") else "bare"


def _native_app(executor: Any) -> Any:
    """a2a-sdk's own JSON-RPC server (its DefaultRequestHandler and in-memory store)."""
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
    from starlette.applications import Starlette

    card = AgentCard(name="native", description="a2a-sdk's server", version="1",
                     capabilities=AgentCapabilities(streaming=True),
                     supported_interfaces=[AgentInterface(
                         url="http://native/", protocol_binding="JSONRPC", protocol_version="1.0")],
                     default_input_modes=["text"], default_output_modes=["text"],
                     skills=[AgentSkill(id="s", name="s", description="s", tags=["t"])])
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(),
                                    agent_card=card)
    return Starlette(routes=create_agent_card_routes(card)
                     + create_jsonrpc_routes(handler, rpc_url="/"))


async def _stream_shapes(c: httpx.AsyncClient, url: str) -> list[tuple[str, ...]]:
    async with c.stream("POST", url, headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": text_message("hello there")}}) as r:
        return [_shape(data["result"]) async for _, data in sse_events(r)]


@asyncio_only
async def test_a_stream_is_the_native_servers_event_for_event() -> None:
    """StreamingExecutor's first working carries a message ("on it"): no bare working of the
    runtime's goes before it, as on a2a-sdk's own server."""
    native = httpx.ASGITransport(_native_app(StreamingExecutor()))
    async with httpx.AsyncClient(transport=native, base_url="http://native") as c:
        theirs = await _stream_shapes(c, "http://native/")
    async with served(A2AApp(from_executor(StreamingExecutor()))) as url, \
            httpx.AsyncClient(timeout=10) as c:
        ours = await _stream_shapes(c, url)
    assert ours == theirs, f"\nours:   {ours}\nnative: {theirs}"
    assert theirs[1] == ("statusUpdate", "TASK_STATE_WORKING", "message")


@asyncio_only
async def test_a_silent_executors_task_reads_working_while_it_runs() -> None:
    """The runtime leaves a new task's start to the executor; one that reports none (it
    enqueues its Task, then works without a word) still reads working soon after it starts."""
    from a2a.helpers import new_task_from_user_message
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.tasks import TaskUpdater

    release = asyncio.Event()

    class Silent(AgentExecutor):
        async def execute(self, context: Any, event_queue: Any) -> None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            await release.wait()
            await TaskUpdater(event_queue, task.id, task.context_id).complete()

        async def cancel(self, context: Any, event_queue: Any) -> None:
            pass

    async with served(A2AApp(from_executor(Silent()))) as url, \
            httpx.AsyncClient(timeout=10) as c:
        body = await rpc(c, url, "SendMessage", {
            "message": text_message("hi"), "configuration": {"returnImmediately": True}})
        task_id = body["result"]["task"]["id"]
        states = []
        with anyio.fail_after(5):
            while not states or states[-1] != "TASK_STATE_WORKING":
                states.append((await get(c, url, task_id))["status"]["state"])
                await anyio.sleep(0.01)
        release.set()
        with anyio.fail_after(5):
            while (await get(c, url, task_id))["status"]["state"] == "TASK_STATE_WORKING":
                await anyio.sleep(0.01)
        final = await get(c, url, task_id)
    assert set(states) <= {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}, states
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
