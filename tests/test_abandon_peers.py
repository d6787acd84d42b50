"""The caller's side of the promise, against servers we did not write (issue 30).

No A2A server but ours cancels work on a hang-up, so a caller-side owner that gives up on a task
must send CancelTask (the abandon rule, client/abandon.py), and never for a run that is detached.
Peers: the official a2a-sdk server (JSON-RPC and HTTP+JSON, tests/sdk_agent.py, which journals
when its executor is cancelled), and our own server as the control. Both backends on our side.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from scoped_a2a import A2AApp, A2AClient, RunContext, Step
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.client.card import AgentCard
from scoped_a2a.client.client import user_message
from scoped_a2a.protocol.types import (
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from scoped_a2a.runtime.policy import RunPolicy

from .helpers import free_port, rpc, served, text_message

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).with_name("sdk_agent.py")
BINDINGS = ["jsonrpc", "rest"]


def wait_for_card(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + ".well-known/agent-card.json").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the peer at {url} did not start (exit {proc.poll()})")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def sdk_url() -> Iterator[str]:
    """One a2a-sdk server offering JSON-RPC and HTTP+JSON (1.0) on one URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--port", str(port), "--rest"])
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_card(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


async def journals(url: str) -> dict[str, dict[str, float]]:
    async with httpx.AsyncClient() as http:
        entries: dict[str, dict[str, float]] = (await http.get(url + "journal")).json()
    return entries


async def journal(url: str, task_id: str) -> dict[str, float]:
    return (await journals(url)).get(task_id, {})


async def wait_cancelled(url: str, task_id: str, within: float) -> dict[str, float]:
    """The journal of ``task_id`` once its executor was cancelled (fails after ``within`` s)."""
    with anyio.move_on_after(within):
        while "cancelled" not in (entry := await journal(url, task_id)):
            await anyio.sleep(0.02)
        return entry
    pytest.fail(f"the a2a-sdk executor of {task_id} was not cancelled within {within}s: "
                f"{await journal(url, task_id)}")


def _text(task: Task) -> str:
    return "".join(p.text or "" for a in task.artifacts or () for p in a.parts)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_multi_turn_step_on_the_sdk(sdk_url: str, binding: str) -> None:
    """The SDK's stream for a continued task begins with a statusUpdate: the turn takes it
    (it failed with 'the stream began with statusUpdate, not a task')."""
    async with A2AClient(sdk_url, transport=binding) as client, Step(client) as step:
        first = await step.turn("ask me")
        assert isinstance(first, Task) and first.status.state is TaskState.INPUT_REQUIRED
        seen: list[str] = []
        second = await step.turn("slow answer", on_event=lambda e: seen.append(e.kind))
        assert isinstance(second, Task), second
        assert second.id == first.id and second.status.state is TaskState.COMPLETED
        assert seen[0] == "statusUpdate", seen  # the case that was refused
        assert _text(second) == "chunk0 chunk1 chunk2 ", second
    assert [t.state for t in step.turns] == [TaskState.INPUT_REQUIRED, TaskState.COMPLETED]
    assert all(t.abandoned is None for t in step.turns)


@pytest.mark.parametrize("peer", ["sdk", "ours"])
async def test_multi_turn_polled_step(sdk_url: str, peer: str) -> None:
    """A step that polls (a card without streaming): the answer to its follow-up was read
    before the follow-up was taken, so it may still say input-required; the turn waits for
    the task to move on, and ends with the answer to this message, not the last question."""
    async with contextlib.AsyncExitStack() as stack:
        url = sdk_url if peer == "sdk" else await stack.enter_async_context(
            served(A2AApp(demo_agent)))
        async with A2AClient(url) as probe:
            card = polled(await probe.card())
        client = await stack.enter_async_context(A2AClient(url, card=card))
        step = await stack.enter_async_context(Step(client, follow=False))
        first = await step.turn("ask me" if peer == "sdk" else "ask")
        assert isinstance(first, Task) and first.status.state is TaskState.INPUT_REQUIRED, first
        second = await step.turn("slow answer")
        assert isinstance(second, Task), second
        assert second.id == first.id and second.status.state is TaskState.COMPLETED, second
    assert [t.state for t in step.turns] == [TaskState.INPUT_REQUIRED, TaskState.COMPLETED]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_cancelled_step_cancels_the_sdk_task(sdk_url: str, binding: str) -> None:
    async with A2AClient(sdk_url, transport=binding) as client:
        async with Step(client) as step:
            deadline = time.time() + 1.0
            with anyio.move_on_after(1.0):
                await step.turn("marathon")
        turn = step.turns[0]
        assert turn.task_id is not None and turn.abandoned is not None
        assert turn.abandoned.outcome == "canceled", turn.abandoned
        entry = await wait_cancelled(sdk_url, turn.task_id, within=1.0)
        assert 0 < entry["cancelled"] - deadline < 1.0, entry
        task = await client.get_task(turn.task_id)
        assert task.status.state is TaskState.CANCELED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_abandoned_blocking_send_cancels_the_sdk_task(
        sdk_url: str, binding: str) -> None:
    """A blocking send learns its task id only with the answer: carried as a stream, it knows
    it in time, and a deadline around it cancels the remote work."""
    async with A2AClient(sdk_url, transport=binding) as client:
        # Completes as a blocking send should: the task, ended, its artifact whole.
        done = await client.send("slow one")
        assert isinstance(done, Task) and done.status.state is TaskState.COMPLETED
        assert _text(done) == "chunk0 chunk1 chunk2 "
        t0 = time.time()
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.8):
                await client.send("marathon")
        started = [tid for tid, e in (await journals(sdk_url)).items() if e["started"] > t0]
        assert len(started) == 1, started
        entry = await wait_cancelled(sdk_url, started[0], within=1.0)
        assert entry["cancelled"] - t0 < 0.8 + 1.0, entry
        assert (await client.get_task(started[0])).status.state is TaskState.CANCELED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_stream_given_up_cancels_but_a_break_does_not(
        sdk_url: str, binding: str) -> None:
    async with A2AClient(sdk_url, transport=binding) as client:
        ids: list[str] = []
        with anyio.move_on_after(0.8):
            async with client.stream("marathon") as events:
                async for item in events:
                    if isinstance(item.event, Task):
                        ids.append(item.event.id)
        await wait_cancelled(sdk_url, ids[0], within=1.0)
        # Leaving on purpose is not an abandon: the task goes on.
        async with client.stream("long left") as events:
            async for item in events:
                if isinstance(item.event, Task):
                    ids.append(item.event.id)
                    break
        await anyio.sleep(0.6)
        assert "cancelled" not in await journal(sdk_url, ids[1])
        assert (await client.get_task(ids[1])).status.state is TaskState.WORKING
        await client.cancel(ids[1])


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_run_the_caller_detached_is_never_cancelled(
        sdk_url: str, binding: str) -> None:
    """onDisconnect: continue, the caller's own choice: giving up leaves the work running."""
    async with A2AClient(sdk_url, transport=binding) as client:
        async with Step(client) as step:
            with anyio.move_on_after(0.8):
                await step.turn("long detached", metadata={"onDisconnect": "continue"})
        turn = step.turns[0]
        assert turn.abandoned is not None and turn.abandoned.outcome == "detached"
        assert turn.task_id is not None
        await anyio.sleep(0.7)
        assert "cancelled" not in await journal(sdk_url, turn.task_id)
        assert (await client.get_task(turn.task_id)).status.state is TaskState.WORKING
        await client.cancel(turn.task_id)


# --- our own server: the control -----------------------------------------------------------


async def test_our_server_cancels_on_the_hang_up_itself() -> None:
    """Against our server no CancelTask is needed: its card says a hang-up cancels."""
    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client:
        async with Step(client) as step:
            with anyio.move_on_after(0.5):
                await step.turn("slow 30")
        turn = step.turns[0]
        assert turn.abandoned is not None and turn.abandoned.outcome == "hang-up"
        assert turn.task_id is not None
        with anyio.fail_after(5):
            while (task := await client.get_task(turn.task_id)).status.state is not \
                    TaskState.CANCELED:
                await anyio.sleep(0.02)
        assert task.status.message is not None
        assert (task.status.message.metadata or {}).get("reason") == "hang-up"


def polled(card: AgentCard) -> AgentCard:
    """The card as a client that cannot stream sees it: a step then sends returnImmediately
    and polls, so only a CancelTask can stop what it gives up on."""
    caps = msgspec.structs.replace(card.capabilities, streaming=False)
    return msgspec.structs.replace(card, capabilities=caps)


@pytest.mark.parametrize("crm", [True, False], ids=["crm-event", "interactive"])
async def test_a_run_a_server_rule_detached_survives_its_step(crm: bool) -> None:
    """The CRM case: a server rule detaches a system event; a step giving up on it must not
    cancel it (the server says so in the task: metadata detachedBy). The same send without
    the rule's metadata is the caller's interactive turn, cancelled by CancelTask."""
    app = A2AApp(demo_agent, policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action"]))
    async with served(app) as url:
        async with A2AClient(url) as probe:
            card = polled(await probe.card())
        async with A2AClient(url, card=card) as client:
            meta: dict[str, Any] | None = (
                {"evoai_crm_event": "inactivity_action"} if crm else None)
            message = user_message("slow 1.5", metadata=meta)
            async with Step(client, follow=False) as step:
                with anyio.move_on_after(0.5):
                    await step.turn(message)
            turn = step.turns[0]
            assert turn.abandoned is not None and turn.task_id is not None
            with anyio.fail_after(8):
                while not (task := await client.get_task(turn.task_id)).status.state.terminal:
                    await anyio.sleep(0.05)
            if crm:
                assert turn.abandoned.outcome == "detached", turn.abandoned
                assert "evoai_crm_event=inactivity_action" in turn.abandoned.detail
                assert task.status.state is TaskState.COMPLETED
            else:
                assert turn.abandoned.outcome == "canceled", turn.abandoned
                assert task.status.state is TaskState.CANCELED


async def ask_then_work(ctx: RunContext) -> str:
    """Asks first; the answer ``slow N`` makes the follow-up's run work N seconds."""
    answer = (await ctx.ask("what now?")).split()
    await anyio.sleep(float(answer[1]) if answer[:1] == ["slow"] else 0)
    return "done"


CRM = {"evoai_crm_event": "inactivity_action"}


@pytest.mark.parametrize(("first", "second", "outcome", "end"), [
    (None, CRM, "detached", TaskState.COMPLETED),
    (CRM, None, "detached", TaskState.COMPLETED),
    (None, None, "canceled", TaskState.CANCELED),
], ids=["crm-follow-up", "after-a-crm-event", "interactive"])
async def test_a_follow_up_a_server_rule_detached_survives_its_step(
        first: dict[str, str] | None, second: dict[str, str] | None, outcome: str,
        end: TaskState) -> None:
    """The CRM event that arrives in an ongoing conversation: a follow-up to a task waiting for
    input, detached by the server's rule, is the run that must survive its caller. The server
    says so in the task it answers (and in the run's first event), so a polled step that gives
    up on that turn leaves it running. A run the rule detached stays detached for the
    follow-ups after it; a conversation the rule never touched is the caller's to cancel."""
    app = A2AApp(ask_then_work, policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action"]))
    async with served(app) as url:
        async with A2AClient(url) as probe:
            card = polled(await probe.card())
        async with A2AClient(url, card=card) as client:
            async with Step(client, follow=False) as step:
                asked = await step.turn(user_message("start", metadata=first))
                assert isinstance(asked, Task), asked
                assert asked.status.state is TaskState.INPUT_REQUIRED, asked.status
                with anyio.move_on_after(0.5):
                    await step.turn(user_message("slow 1.5", metadata=second))
            turn = step.turns[1]
            assert turn.abandoned is not None and turn.task_id == asked.id, step.turns
            assert turn.abandoned.outcome == outcome, turn.abandoned
            with anyio.fail_after(8):
                while not (task := await client.get_task(asked.id)).status.state.terminal:
                    await anyio.sleep(0.05)
            assert task.status.state is end, task.status
            marker = (task.metadata or {}).get("detachedBy")
            assert (marker is not None) == (outcome == "detached"), task.metadata


async def test_a_callers_own_detached_by_is_not_repeated_by_the_server() -> None:
    """``detachedBy`` is the server's word: a caller that puts it in its request metadata
    (to make its task look detached to others giving up on it) does not see it stored."""
    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client:
        task = await client.send(user_message("hi"), metadata={"detachedBy": "forged", "k": 1})
        assert isinstance(task, Task), task
        stored = await client.get_task(task.id)
    assert stored.metadata == {"k": 1}, stored.metadata


async def test_a_resent_crm_follow_up_is_answered_with_the_marker_too() -> None:
    """The CRM system that sends its event twice at once (an at-least-once webhook): both
    returnImmediately answers to the follow-up say the run is detached. The resend is answered
    from the stored task, read before the run's first event recorded the message (and the
    marker): it must say what the first answer said, or the client that got it cancels the CRM
    run when it gives up. Ten tries (one answer in thirty had it before the fix)."""
    app = A2AApp(ask_then_work, policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action"]))
    async with served(app) as url, httpx.AsyncClient() as one, httpx.AsyncClient() as two:
        for _ in range(10):
            asked = (await rpc(one, url, "SendMessage", {"message": text_message("start")}))[
                "result"]["task"]
            event = text_message("slow 0.2", taskId=asked["id"], metadata=CRM)
            answers: list[dict[str, Any]] = []

            async def send(client: httpx.AsyncClient, message: dict[str, Any],
                           answers: list[dict[str, Any]]) -> None:
                answers.append(await rpc(client, url, "SendMessage", {
                    "message": message, "configuration": {"returnImmediately": True}}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(send, one, event, answers)
                tg.start_soon(send, two, event, answers)
            said = [(a["result"]["task"]["status"]["state"], a["result"]["task"].get("metadata"))
                    for a in answers]
            marker = {"detachedBy": "rule evoai_crm_event=inactivity_action"}
            assert [meta for _, meta in said] == [marker, marker], said
            assert "TASK_STATE_INPUT_REQUIRED" not in [state for state, _ in said], said


async def relaying(ctx: RunContext) -> str:
    """A relay: its progress carries the metadata of what it relays (as a proxy passes on a
    downstream agent's status updates, whose ``detachedBy`` is that agent's word, not this
    server's); here the caller's own message metadata. Then works 1.5 s."""
    await ctx.publish(TaskStatusUpdateEvent(
        task_id=ctx.task_id, context_id=ctx.context_id,
        status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
        metadata=dict(ctx.message.metadata or {})))
    await anyio.sleep(1.5)
    return "done"


@pytest.mark.parametrize("adapted", [False, True], ids=["agent", "a2a-sdk-executor"])
@pytest.mark.parametrize(("meta", "outcome", "end"), [
    ({"detachedBy": "forged"}, "hang-up", TaskState.CANCELED),
    ({**CRM, "detachedBy": None}, "detached", TaskState.COMPLETED),
], ids=["forged-marker", "erased-marker"])
async def test_an_agents_status_metadata_does_not_set_the_servers_marker(
        meta: dict[str, Any], outcome: str, end: TaskState, adapted: bool,
        anyio_backend: str) -> None:
    """``detachedBy`` in the task is the server's word on its run: a status update an agent
    publishes (a relay's, carrying its caller's or a downstream's metadata) neither makes an
    interactive run look detached nor erases a server rule's marker: the stored task and a
    step following the stream (whose turn says what became of the run it gave up on) both
    keep the server's word. Fails without runtime/context.py's _unmarked: the task says
    detachedBy "forged" and the turn "goes on" though the run was cancelled; the CRM task's
    marker is gone."""
    if adapted and anyio_backend != "asyncio":
        pytest.skip("a2a-sdk executors run on asyncio only")
    agent: Any = relaying
    if adapted:  # the same relay as an a2a-sdk executor (its TaskUpdater's status metadata)
        from scoped_a2a.adapters.a2a_sdk import from_executor

        from .sdk_executors import RelayingExecutor
        agent = from_executor(RelayingExecutor())
    app = A2AApp(agent, policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action"]))
    async with served(app) as url, A2AClient(url) as client:
        async with Step(client, follow=False) as step:
            with anyio.move_on_after(0.7):
                await step.turn(user_message("go", metadata=meta))
        turn = step.turns[0]
        assert turn.abandoned is not None and turn.task_id is not None, step.turns
        with anyio.fail_after(8):
            while not (task := await client.get_task(turn.task_id)).status.state.terminal:
                await anyio.sleep(0.05)
        marker = (task.metadata or {}).get("detachedBy")
        said = (task.metadata, turn.abandoned, task.status.state)
        assert (marker == "rule evoai_crm_event=inactivity_action"
                if outcome == "detached" else marker is None), said
        assert turn.abandoned.outcome == outcome, said
        assert task.status.state is end, said


# --- other frameworks' own servers: Google ADK's to_a2a, fasta2a (pydantic-ai) --------------

FRAMEWORKS = Path(__file__).with_name("framework_peers.py")


@pytest.fixture(scope="module", params=["adk", "fasta2a"])
def framework(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(kind, url) of an agent served by that framework's own A2A server."""
    port = free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}  # ADK warns 'experimental' per call
    proc = subprocess.Popen([sys.executable, str(FRAMEWORKS), "--kind", request.param,
                             "--port", str(port)], env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_card(url, proc, timeout=60)
        yield request.param, url
    finally:
        proc.terminate()
        proc.wait(10)


async def test_multi_turn_step_on_a_framework(framework: tuple[str, str]) -> None:
    """Two turns of one conversation: the second one's model sees both user messages."""
    _, url = framework
    async with A2AClient(url) as client, Step(client) as step:
        first = await step.turn("hello")
        second = await step.turn("again")
    assert isinstance(first, Task) and isinstance(second, Task), (first, second)
    assert first.status.state is second.status.state is TaskState.COMPLETED
    assert _text(first) == "echo: hello (user turns: 1)", first
    assert _text(second) == "echo: again (user turns: 2)", second
    assert second.context_id == first.context_id


async def test_a_cancelled_step_on_a_framework(framework: tuple[str, str]) -> None:
    """ADK honours CancelTask: its model's work is cancelled within 1 s of the step's. fasta2a
    accepts it and does nothing (its worker's cancel_task is empty): the turn says so
    ('requested', the task still working) rather than claiming a cancel."""
    kind, url = framework
    tag = uuid.uuid4().hex
    async with A2AClient(url) as client:
        async with Step(client) as step:
            gave_up: list[float] = []
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:

                    async def give_up_once_working() -> None:
                        while "started" not in (await journal(url, tag)):
                            await anyio.sleep(0.02)
                        gave_up.append(time.time())
                        tg.cancel_scope.cancel()  # the turn is cancelled, as a deadline would

                    tg.start_soon(give_up_once_working)
                    await step.turn(f"long {tag}")
        turn = step.turns[0]
        assert turn.abandoned is not None, turn
        if kind == "adk":
            assert turn.abandoned.outcome == "canceled", turn.abandoned
            entry = await wait_cancelled(url, tag, within=1.0)
            assert 0 < entry["cancelled"] - gave_up[0] < 1.0, (entry, gave_up)
        else:
            assert turn.abandoned.outcome == "requested", turn.abandoned
            assert "still shows it working" in turn.abandoned.detail
            await anyio.sleep(0.5)
            assert "cancelled" not in await journal(url, tag)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_giving_up_before_the_first_event_still_cancels(
        sdk_url: str, binding: str) -> None:
    """Cancelled once the stream is open but before a single event arrived, the owner does not
    know the task yet: the read is let finish (shielded, bounded), its first event names the
    task, and the task is cancelled rather than left running (it was, before)."""
    async with A2AClient(sdk_url, transport=binding) as client:
        t0 = time.time()
        with anyio.CancelScope() as scope:
            async with client.stream("marathon") as events:
                scope.cancel()
                await events.__anext__()  # cancelled before it could hand out an event
        assert scope.cancelled_caught
        with anyio.fail_after(5):
            while not (started := [tid for tid, e in (await journals(sdk_url)).items()
                                   if e["started"] > t0]):
                await anyio.sleep(0.02)
        assert len(started) == 1, started
        await wait_cancelled(sdk_url, started[0], within=1.0)
        assert (await client.get_task(started[0])).status.state is TaskState.CANCELED


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("owner", ["stream", "step", "send"])
async def test_giving_up_before_any_answer_finds_the_task_and_cancels_it(
        sdk_url: str, binding: str, owner: str) -> None:
    """Given up before the agent answered at all (its task event comes 0.5 s late): no answer
    names the task, so it is found with ListTasks in the context made for the message, and
    cancelled (it was left running before)."""
    async with A2AClient(sdk_url, transport=binding) as client:
        t0 = time.time()
        with anyio.move_on_after(0.2):
            if owner == "stream":
                async with client.stream("late one") as events:
                    async for _ in events:
                        pass
            elif owner == "step":
                async with Step(client, follow=False) as step:
                    await step.turn("late one")
            else:
                await client.send("late one")
        if owner == "step":
            assert step.turns[0].abandoned is not None, step.turns
            assert step.turns[0].abandoned.outcome == "canceled", step.turns[0].abandoned
        with anyio.fail_after(5):
            while not (started := [tid for tid, e in (await journals(sdk_url)).items()
                                   if e["started"] > t0]):
                await anyio.sleep(0.02)
        await wait_cancelled(sdk_url, started[0], within=2.5)
        task = await client.get_task(started[0])
        assert task.status.state is TaskState.CANCELED, task.status


async def test_the_abandon_cancel_carries_the_callers_credentials(tmp_path: Path) -> None:
    """On a server that wants API keys, the CancelTask a polled step sends on giving up is its
    caller's own: accepted, recorded as by alice; another caller cannot see the task."""
    from scoped_a2a.client.auth import ApiKey
    from scoped_a2a.protocol.errors import TaskNotFound
    from scoped_a2a.server.auth import Authenticator
    from scoped_a2a.server.auth.api_keys import ApiKeys

    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-secret\nbob:bob-secret\n")
    app = A2AApp(demo_agent, authenticate=Authenticator([ApiKeys(keys)]))
    async with served(app) as url:
        async with A2AClient(url, auth=ApiKey("alice-secret")) as probe:
            card = polled(await probe.card())
        async with A2AClient(url, card=card, auth=ApiKey("alice-secret")) as alice:
            async with Step(alice, follow=False) as step:
                with anyio.move_on_after(0.5):
                    await step.turn("slow 30")
            turn = step.turns[0]
            assert turn.abandoned is not None and turn.abandoned.outcome == "canceled", turn
            assert turn.task_id is not None
            task = await alice.get_task(turn.task_id)
            assert task.status.state is TaskState.CANCELED
            assert task.status.message is not None
            said = "".join(p.text or "" for p in task.status.message.parts)
            assert "(by alice)" in said, said
        async with A2AClient(url, auth=ApiKey("bob-secret")) as bob:
            with pytest.raises(TaskNotFound):
                await bob.get_task(turn.task_id)
