"""Across hops: ``ctx.call`` carries cancellation and deadlines down a chain of real servers.

A chain A -> B -> C of scoped-a2a apps served by hypercorn (both backends): A's agent calls B
with ``ctx.call``, B's calls C, C's waits (or finishes). A hang-up at A, a CancelTask on A, and a
deadline each end all three runs; a detached A keeps its downstream calls to the end. An a2a-sdk
server as B (it never cancels on disconnect) is stopped by the explicit CancelTask.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, A2AClient, RunContext
from scoped_a2a.protocol.deadline import BUDGET_KEY, DEADLINE_KEY
from scoped_a2a.protocol.types import Task, TaskState

from .helpers import free_port, rpc, served, text_message

pytestmark = pytest.mark.anyio

SDK_SCRIPT = Path(__file__).with_name("sdk_agent.py")
SDK_FORWARDER = Path(__file__).with_name("sdk_forward_agent.py")


@dataclass
class Probe:
    """What C's agent saw: its start, its cancellation, its request metadata."""

    started: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)
    cancelled_at: float = 0.0
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)


def _reason(task: Task) -> str | None:
    msg = task.status.message
    return None if msg is None else (msg.metadata or {}).get("reason")


@asynccontextmanager
async def chain(c_seconds: float | None = None, *, b_url: str | None = None
                ) -> AsyncIterator[tuple[dict[str, str], Probe]]:
    """Serve A -> B -> C; C sleeps ``c_seconds`` (None: until cancelled) then answers.

    ``b_url``: use this agent as B (A calls it) instead of a scoped-a2a B.
    """
    probe = Probe()
    urls: dict[str, str] = {}

    async def agent_c(ctx: RunContext) -> str:
        probe.metadata["C"] = ctx.metadata
        probe.started.set()
        try:
            await anyio.sleep(c_seconds if c_seconds is not None else 3600)
        except anyio.get_cancelled_exc_class():
            probe.cancelled_at = time.monotonic()
            probe.cancelled.set()
            raise
        probe.finished.set()
        return "c done"

    def forwarding(name: str, to: str) -> Any:
        async def agent(ctx: RunContext) -> str:
            probe.metadata[name] = ctx.metadata
            result = await ctx.call(urls[to], ctx.text)
            assert isinstance(result, Task)
            text = "".join(p.text or "" for p in (result.status.message.parts
                                                  if result.status.message else []))
            return f"{name}<{text}>"
        return agent

    apps = {"C": A2AApp(agent_c), "B": A2AApp(forwarding("B", "C")),
            "A": A2AApp(forwarding("A", "B"))}
    async with served(apps["C"]) as c, served(apps["B"]) as b, served(apps["A"]) as a:
        urls.update(A=a, B=b_url or b, C=c)
        yield urls, probe


async def _tree(urls: dict[str, str], a_task: str) -> dict[str, Task]:
    """Walk A's task to B's and C's through the downstreamTasks metadata."""
    found: dict[str, Task] = {}
    task_id: str | None = a_task
    for name in ("A", "B", "C"):
        if task_id is None:
            break
        async with A2AClient(urls[name]) as client:
            task = await client.get_task(task_id)
        found[name] = task
        down = (task.metadata or {}).get("downstreamTasks") or []
        task_id = down[0]["taskId"] if down else None
        if down:
            assert down[0]["agent"] == urls[{"A": "B", "B": "C", "C": "C"}[name]]
    return found


async def _until_ended(urls: dict[str, str], a_task: str, names: str = "ABC"
                       ) -> dict[str, Task]:
    with anyio.fail_after(10):
        while True:
            tree = await _tree(urls, a_task)
            if all(n in tree and tree[n].status.state.terminal for n in names):
                return tree
            await anyio.sleep(0.02)


async def test_hang_up_at_a_cancels_b_and_c() -> None:
    async with chain() as (urls, probe), A2AClient(urls["A"]) as client:
        async with client.stream("go") as events:
            first = (await events.__anext__()).event
            assert isinstance(first, Task)
            with anyio.fail_after(10):
                await probe.started.wait()
            hung_up = time.monotonic()
        with anyio.fail_after(5):
            await probe.cancelled.wait()
        assert probe.cancelled_at - hung_up < 5
        tree = await _until_ended(urls, first.id)
        assert [tree[n].status.state for n in "ABC"] == [TaskState.CANCELED] * 3
        assert _reason(tree["A"]) == "hang-up"
        # B and C may see the hang-up or the shielded CancelTask first; both end them.
        assert _reason(tree["B"]) in ("hang-up", "CancelTask")
        assert _reason(tree["C"]) in ("hang-up", "CancelTask")


async def test_cancel_task_on_a_cancels_b_and_c() -> None:
    async with chain() as (urls, probe), A2AClient(urls["A"]) as client:
        sent = await client.send("go", return_immediately=True)
        assert isinstance(sent, Task)
        with anyio.fail_after(10):
            await probe.started.wait()
        canceled = await client.cancel(sent.id)
        assert canceled.status.state is TaskState.CANCELED
        with anyio.fail_after(5):
            await probe.cancelled.wait()
        tree = await _until_ended(urls, sent.id)
        assert [tree[n].status.state for n in "ABC"] == [TaskState.CANCELED] * 3
        assert _reason(tree["A"]) == "CancelTask"


async def test_detached_a_holds_its_calls_to_the_end() -> None:
    async with chain(c_seconds=0.5) as (urls, probe), A2AClient(urls["A"]) as client:
        sent = await client.send("go", return_immediately=True)  # detached; caller leaves
        assert isinstance(sent, Task)
        tree = await _until_ended(urls, sent.id)
        assert probe.finished.is_set() and not probe.cancelled.is_set()
        assert [tree[n].status.state for n in "ABC"] == [TaskState.COMPLETED] * 3
        assert tree["A"].status.message is not None
        assert tree["A"].status.message.text == "A<B<c done>>"


async def test_deadline_ends_every_hop_canceled_with_reason_deadline() -> None:
    async with chain() as (urls, probe), httpx.AsyncClient(timeout=10) as http:
        body = await rpc(http, urls["A"], "SendMessage", {
            "message": text_message("go"), "metadata": {BUDGET_KEY: 800}})
        task = body["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_CANCELED"
        assert task["status"]["message"]["metadata"]["reason"] == "deadline"
        assert probe.cancelled.is_set()
        tree = await _until_ended(urls, task["id"])
        assert [_reason(tree[n]) for n in "ABC"] == ["deadline"] * 3
        budgets = [probe.metadata[n][BUDGET_KEY] for n in "BC"]
        assert 0 < budgets[1] < budgets[0] < 800


async def test_absolute_deadline_and_bad_deadlines() -> None:
    async def agent(ctx: RunContext) -> str:
        await anyio.sleep(3600)
        return "never"

    async with served(A2AApp(agent)) as url, httpx.AsyncClient(timeout=10) as http:
        card = (await http.get(url + ".well-known/agent-card.json")).json()
        uris = [e["uri"] for e in card["capabilities"]["extensions"]]
        assert "https://github.com/scoped-a2a/scoped-a2a/ext/deadline/v1" in uris
        soon = time.time() + 0.3
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(soon)) + \
            f".{int(soon % 1 * 1000):03d}Z"
        body = await rpc(http, url, "SendMessage", {
            "message": text_message("go"), "metadata": {DEADLINE_KEY: stamp}})
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert body["result"]["task"]["status"]["message"]["metadata"]["reason"] == "deadline"
        for bad in ({BUDGET_KEY: -1}, {BUDGET_KEY: "soon"}, {DEADLINE_KEY: "tomorrow"},
                    {DEADLINE_KEY: "2026-12-01T08:00:00"}):
            body = await rpc(http, url, "SendMessage", {
                "message": text_message("go"), "metadata": bad})
            assert body["error"]["code"] == -32602, bad
            assert next(iter(bad)) in body["error"]["message"]
        listed = await rpc(http, url, "ListTasks", {})
        assert len(listed["result"]["tasks"]) == 1  # the bad requests created no task


# --- an a2a-sdk server as B: it never cancels on disconnect -------------------------------


@contextmanager
def _sdk_server(script: Path) -> Iterator[str]:
    """Run an a2a-sdk server script on a free loopback port; yield its URL; always stop it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(script), "--port", str(port)],
                            env=dict(os.environ))
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + ".well-known/agent-card.json").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the a2a-sdk server did not start")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def sdk_b() -> Iterator[str]:
    """The suite's a2a-sdk agent (``long ...``: a 10 s task)."""
    with _sdk_server(SDK_SCRIPT) as url:
        yield url


@pytest.fixture(scope="module")
def sdk_forwarder() -> Iterator[str]:
    """An a2a-sdk agent that forwards ``hop URL`` to URL (tests/sdk_forward_agent.py)."""
    with _sdk_server(SDK_FORWARDER) as url:
        yield url


async def test_hang_up_at_a_cancels_an_sdk_b_by_cancel_task(sdk_b: str) -> None:
    """The SDK's ``long`` task runs 10 s and ignores the hang-up: only CancelTask stops it."""
    async with chain(b_url=sdk_b) as (urls, _), A2AClient(urls["A"]) as client:
        async with client.stream("long job") as events:
            first = (await events.__anext__()).event
            assert isinstance(first, Task)
            with anyio.fail_after(10):
                while not ((await client.get_task(first.id)).metadata or {}).get(
                        "downstreamTasks"):
                    await anyio.sleep(0.02)
        tree = await _until_ended(urls, first.id, names="AB")
        assert tree["A"].status.state is TaskState.CANCELED
        assert tree["B"].status.state is TaskState.CANCELED  # long before its 10 s


async def test_hang_up_at_a_reaches_c_through_an_sdk_b(sdk_forwarder: str) -> None:
    """A -> a2a-sdk B -> C: the hang-up at A stops B only by A's CancelTask; B's cancelled
    executor abandons its stream to C, which C takes as a hang-up."""
    async with chain(b_url=sdk_forwarder) as (urls, probe), A2AClient(urls["A"]) as client:
        async with client.stream(f"hop {urls['C']}") as events:
            first = (await events.__anext__()).event
            assert isinstance(first, Task)
            with anyio.fail_after(10):
                await probe.started.wait()
        with anyio.fail_after(5):
            await probe.cancelled.wait()
        tree = await _until_ended(urls, first.id, names="AB")
        assert tree["A"].status.state is TaskState.CANCELED
        assert tree["B"].status.state is TaskState.CANCELED


async def test_stream_call_cancels_an_unsettled_downstream(sdk_b: str) -> None:
    """``ctx.stream``: leaving the block early cancels the downstream task."""
    seen: dict[str, Any] = {}

    async def agent(ctx: RunContext) -> str:
        async with ctx.stream(sdk_b, "long job") as events:
            async for _ in events:
                if events.task is not None and events.task.artifacts:
                    break  # one chunk is enough
            seen["task"] = events.task
        return "enough"

    async with served(A2AApp(agent)) as url, A2AClient(url) as client:
        done = await client.send("go")
        assert isinstance(done, Task) and done.status.state is TaskState.COMPLETED
        async with A2AClient(sdk_b) as sdk:
            down = await sdk.get_task(seen["task"].id)
        assert down.status.state is TaskState.CANCELED
        assert (done.metadata or {})["downstreamTasks"][0]["taskId"] == down.id


async def test_call_targets_a_card_or_a_client_and_polls_without_streaming() -> None:
    """A card (here one saying it cannot stream: send + poll) and an open client as targets."""
    import msgspec

    async def leaf(ctx: RunContext) -> str:
        await anyio.sleep(0.3)
        return f"leaf:{ctx.text}"

    seen: dict[str, Any] = {}
    async with served(A2AApp(leaf)) as leaf_url, A2AClient(leaf_url) as leaf_client:
        card = await leaf_client.card()
        no_stream = msgspec.structs.replace(
            card, capabilities=msgspec.structs.replace(card.capabilities, streaming=False))

        async def caller(ctx: RunContext) -> str:
            by_card = await ctx.call(no_stream, "one")
            by_client = await ctx.call(leaf_client, "two")
            seen["card"], seen["client"] = by_card, by_client
            return "both"

        async with served(A2AApp(caller)) as url, A2AClient(url) as client:
            done = await client.send("go")
    assert isinstance(done, Task) and done.status.state is TaskState.COMPLETED
    for key, text in (("card", "leaf:one"), ("client", "leaf:two")):
        task = seen[key]
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
        assert task.status.message is not None and task.status.message.text == text
    down = (done.metadata or {})["downstreamTasks"]
    assert [d["taskId"] for d in down] == [seen["card"].id, seen["client"].id]


async def test_call_answers_a_downstream_question_and_records_the_task_once() -> None:
    from scoped_a2a.client import user_message

    async def asker(ctx: RunContext) -> str:
        answer = await ctx.ask("which colour?")
        return f"painted {answer}"

    async with served(A2AApp(asker)) as asker_url:
        async def caller(ctx: RunContext) -> str:
            first = await ctx.call(asker_url, "paint it")
            assert isinstance(first, Task)
            assert first.status.state is TaskState.INPUT_REQUIRED  # settled: not cancelled
            done = await ctx.call(asker_url, user_message(
                "blue", task_id=first.id, context_id=first.context_id))
            assert isinstance(done, Task) and done.status.message is not None
            return done.status.message.text

        async with served(A2AApp(caller)) as url, A2AClient(url) as client:
            result = await client.send("go")
    assert isinstance(result, Task) and result.status.state is TaskState.COMPLETED
    assert result.status.message is not None and result.status.message.text == "painted blue"
    assert len((result.metadata or {})["downstreamTasks"]) == 1
