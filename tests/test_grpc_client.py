"""Our client over gRPC (``A2AClient(transport="grpc")``, client/grpc.py) against our own server
through real hypercorn, both backends: every client method, a gRPC-only card (client, Step,
CLI), cancellation (RST_STREAM cancels the run, the connection stays), deadlines as
``grpc-timeout``, TLS, credentials, 200 concurrent calls on one connection, multi-MB answers
and requests (flow control both ways), and a server killed mid-stream."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import trustme

from scoped_a2a import A2AApp, A2AClient, MemorySink, RunContext, Step
from scoped_a2a.client.auth import ApiKey, BearerToken
from scoped_a2a.client.card import AgentCard, decode_card
from scoped_a2a.client.client import user_message
from scoped_a2a.client.errors import AgentUnreachable, TransportError
from scoped_a2a.protocol.errors import (
    TaskNotCancelable,
    TaskNotFound,
    Unauthenticated,
    UnsupportedOperation,
    VersionNotSupported,
)
from scoped_a2a.protocol.types import Message, Task, TaskState
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys

from . import test_grpc
from .helpers import served
from .test_cli import ROOT, start
from .test_tls import served_tls

pytestmark = pytest.mark.anyio
CANCELLED = test_grpc.CANCELLED


async def agent(ctx: RunContext) -> str:
    """``big N``: an artifact of N bytes; ``size``: the length of the text it got; else
    tests/test_grpc.py's agent (``sleep N``, ``ask``, echo)."""
    text = ctx.text.strip()
    if text.startswith("big "):
        await ctx.artifact("x" * int(text.split()[1]), name="big")
        return "big"
    if text.startswith("size "):
        return f"got {len(text)}"
    return await test_grpc.agent(ctx)


def grpc_app(**kw: Any) -> A2AApp:
    return A2AApp(agent, grpc=True, grace=1.0, **kw)


def grpc_only(app: A2AApp, url: str) -> None:
    """Make ``app``'s card list its gRPC interface only (the cards built so far dropped)."""
    target = url.split("//", 1)[1].rstrip("/")
    app.cards.fields["supportedInterfaces"] = [
        {"url": target, "protocolBinding": "GRPC", "protocolVersion": "1.0"}]
    app.cards._cache.clear()


def text(task: Task | Message) -> str:
    if isinstance(task, Message):
        return task.text
    return "".join(p.text or "" for a in task.artifacts or [] for p in a.parts)


async def wait_cancelled(task_id: str, within: float = 3.0) -> float:
    """Seconds until the run of ``task_id`` saw its cancellation (fails after ``within``)."""
    began = time.perf_counter()
    with anyio.move_on_after(within):
        while task_id not in CANCELLED:
            await anyio.sleep(0.01)
    assert task_id in CANCELLED, f"the run of {task_id} was not cancelled within {within} s"
    return CANCELLED[task_id] - began


async def test_every_client_method_over_grpc() -> None:
    async with served(grpc_app()) as url, A2AClient(url, transport="grpc") as client:
        assert await client.binding() == "grpc"
        task = await client.send("hello")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
        assert text(task) == "echo: hello"
        early = await client.send("sleep 0.5", return_immediately=True)
        assert isinstance(early, Task)
        assert early.status.state in (TaskState.SUBMITTED, TaskState.WORKING)
        got = await client.get_task(task.id, history_length=1)
        assert got.id == task.id and len(got.history or []) == 1
        page = await client.list_tasks(page_size=1)
        assert len(page.tasks) == 1 and page.next_page_token, page
        async with client.stream("streamed") as events:
            kinds = [e.kind async for e in events]
        assert kinds[0] == "task" and "artifactUpdate" in kinds and kinds[-1] == "statusUpdate"
        # Subscribe: the task first, then its updates to the end.
        async with client.subscribe(early.id) as events:
            seen = [e async for e in events]
        assert seen[0].kind == "task", [e.kind for e in seen]
        assert seen[-1].event.status.state is TaskState.COMPLETED  # type: ignore[union-attr]
        # Resumed with last-event-id: only what came after that position (no snapshot).
        parked = await client.send("ask")
        assert isinstance(parked, Task) and parked.status.state is TaskState.INPUT_REQUIRED
        async with client.subscribe(parked.id, last_event_id=0) as events:
            with anyio.fail_after(5):
                first = await events.__anext__()
        assert first.kind != "task", first
        canceled = await client.cancel(parked.id)
        assert canceled.status.state is TaskState.CANCELED
        with pytest.raises(TaskNotFound, match="no-such-task"):
            await client.get_task("no-such-task")
        with pytest.raises(TaskNotCancelable):
            await client.cancel(task.id)
        with pytest.raises(UnsupportedOperation):  # subscribing to a task that ended
            async with client.subscribe(task.id) as events:
                async for _ in events:
                    pass
        # The trajectory read has no gRPC method: it goes to the card's JSON-RPC interface.
        trajectory = await client.read_trajectory(task.id)
        assert trajectory.state is TaskState.COMPLETED and trajectory.events


async def test_the_cards_order_chooses_grpc_and_a_grpc_only_card_works() -> None:
    app = grpc_app()
    async with served(app) as url:
        # Listed after JSON-RPC: chosen only when forced.
        async with A2AClient(url) as client:
            assert await client.binding() == "jsonrpc"
        grpc_only(app, url)
        async with A2AClient(url) as client:
            assert await client.binding() == "grpc"
            task = await client.send("only grpc")
            assert isinstance(task, Task) and text(task) == "echo: only grpc"
            with pytest.raises(UnsupportedOperation, match="no gRPC method"):
                await client.read_trajectory(task.id)
        # Forcing JSON-RPC names what the card does offer (not "none").
        async with A2AClient(url, transport="jsonrpc") as client:
            with pytest.raises(VersionNotSupported, match=r"it offers: GRPC 1\.0"):
                await client.binding()
        async with A2AClient(url, transport="rest") as client:
            with pytest.raises(VersionNotSupported, match=r"no HTTP\+JSON.*GRPC 1\.0"):
                await client.binding()
        # A Step turn over the gRPC-only card (no trajectory extension reachable: it follows
        # the task's stream).
        sink = MemorySink()
        async with A2AClient(url) as client, Step(client, sink=sink) as step:
            turned = await step.turn("a step over grpc")
            assert isinstance(turned, Task), turned
            assert turned.status.state is TaskState.COMPLETED, turned
            assert text(turned) == "echo: a step over grpc"
            with anyio.fail_after(5):
                follower = step.turns[0].follower
                if follower is not None:
                    await follower.done.wait()
        kinds = [e.kind for e in sink.turns["0001"].events]
        assert "artifactUpdate" in kinds and kinds[-1] == "statusUpdate", kinds


async def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    with anyio.fail_after(timeout):
        return await anyio.run_process(
            [sys.executable, "-m", "scoped_a2a", *args], check=False, env=env, cwd=ROOT)


async def test_cli_send_over_grpc() -> None:
    app = grpc_app()
    async with served(app) as url:
        done = await _cli("send", url, "via the cli", "--transport", "grpc", "--json")
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert "echo: via the cli" in done.stdout.decode(), done.stdout.decode()[-2000:]
        grpc_only(app, url)
        done = await _cli("send", url, "grpc only card")
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert "echo: grpc only card" in done.stdout.decode(), done.stdout.decode()[-2000:]
        missing = await _cli("get", url, "no-such-task", "--transport", "grpc")
        assert missing.returncode == 3, missing.stderr.decode()[-2000:]
        assert "no task by that id" in missing.stderr.decode(), missing.stderr.decode()[-2000:]


async def test_a_cancelled_call_resets_its_stream_and_the_run_is_cancelled() -> None:
    async with served(grpc_app()) as url, A2AClient(url, transport="grpc") as client:
        await client.send("warm up")
        transport, codec = await client._rpc()
        conn = client._grpc._conn if client._grpc else None
        req = client._send_request(user_message("sleep 30"), return_immediately=False,
                                   history_length=None, metadata=None,
                                   accepted_output_modes=None)
        before = set(CANCELLED)
        with anyio.move_on_after(0.5):
            await transport.call("SendMessage", codec.send_params(req), bounded=False)
        began = time.perf_counter()
        with anyio.move_on_after(3):
            while not set(CANCELLED) - before:
                await anyio.sleep(0.005)
        new = set(CANCELLED) - before
        assert new, "the run was not cancelled after the call was (RST_STREAM)"
        print("cancel -> run cancelled:", CANCELLED[new.pop()] - began, "s")
        # The connection stays, and serves the next call.
        again = await client.send("after the cancel")
        assert isinstance(again, Task) and text(again) == "echo: after the cancel"
        assert client._grpc is not None and client._grpc._conn is conn


async def test_the_callers_deadline_goes_as_grpc_timeout() -> None:
    async with served(grpc_app()) as url, A2AClient(url, transport="grpc") as client:
        before = set(CANCELLED)
        answered: Task | Message | None = None
        began = time.perf_counter()
        with anyio.move_on_after(1.0):
            answered = await client.send("sleep 30")
        took = time.perf_counter() - began
        with anyio.move_on_after(3):
            while not set(CANCELLED) - before:
                await anyio.sleep(0.01)
        new = set(CANCELLED) - before
        assert len(new) == 1, "the run did not end at the call's deadline"
        task = await client.get_task(new.pop())
        # The server took the deadline as the run's budget: canceled for its deadline (the
        # answer may even beat the client's own deadline).
        assert task.status.state is TaskState.CANCELED, task
        assert "deadline" in str(task.status).lower() + str(task.metadata).lower(), task
        assert took < 3, took
        if answered is not None:
            assert isinstance(answered, Task) and answered.status.state is TaskState.CANCELED


async def test_tls_with_a_test_ca(tmp_path: Path) -> None:
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with served_tls(grpc_app(), tmp_path, ca) as url, \
            httpx.AsyncClient(verify=context) as http:
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        async with A2AClient(url, http=http, transport="grpc",
                             ssl_context=trusted) as client:
            assert (await client._rpc())[0].tls  # type: ignore[union-attr]
            task = await client.send("over tls")
            assert isinstance(task, Task) and text(task) == "echo: over tls"
        # Without the CA: the certificate is refused, as AgentUnreachable.
        async with A2AClient(url, http=http, transport="grpc") as client:
            with pytest.raises(AgentUnreachable, match=r"CERTIFICATE_VERIFY_FAILED|certif"):
                await client.send("untrusted")


async def test_api_key_and_bearer_credentials_as_metadata(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-secret\n")
    app = grpc_app(authenticate=Authenticator([ApiKeys(keys)]))
    async with served(app) as url:
        for auth in (ApiKey("alice-secret"), BearerToken("alice-secret"), "alice-secret"):
            async with A2AClient(url, transport="grpc", auth=auth) as client:
                task = await client.send("with a key")
                assert isinstance(task, Task) and text(task) == "echo: with a key", auth
        async with A2AClient(url, transport="grpc") as client:
            with pytest.raises(Unauthenticated, match=r"none was sent.*its card accepts"):
                await client.send("no key")
        async with A2AClient(url, transport="grpc", auth=ApiKey("wrong")) as client:
            with pytest.raises(Unauthenticated, match="refused the credential sent"):
                await client.send("wrong key")


async def test_200_concurrent_calls_share_one_connection() -> None:
    async with served(grpc_app()) as url, A2AClient(url, transport="grpc") as client:
        await client.send("warm up")
        assert client._grpc is not None
        conn = client._grpc._conn
        results: list[str] = []

        async def one(i: int) -> None:
            answer = await client.send(f"call {i}")
            results.append(text(answer))

        began = time.perf_counter()
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(one, i)
        print(f"200 concurrent sends: {time.perf_counter() - began:.2f} s")
        assert sorted(results) == sorted(f"echo: call {i}" for i in range(200))
        assert client._grpc._conn is conn and client._grpc.connections == 1


async def test_multi_megabyte_answers_and_requests() -> None:
    async with served(grpc_app()) as url, A2AClient(url, transport="grpc") as client:
        size = 6 << 20  # more than the stream window (4 MiB) and hypercorn's send window
        with anyio.fail_after(60):
            task = await client.send(f"big {size}")
            assert isinstance(task, Task) and len(text(task)) == size
            async with client.stream(f"big {size}") as events:
                sizes = [len(e.event.artifact.parts[0].text or "")  # type: ignore[union-attr]
                         async for e in events if e.kind == "artifactUpdate"]
            assert sizes == [size]
            # A request far over the server's initial window (64 KiB): the client waits for
            # its WINDOW_UPDATEs.
            reply = await client.send("size " + "y" * (3 << 20))
            assert isinstance(reply, Task) and reply.status.message is not None
            assert reply.status.message.text == f"got {5 + (3 << 20)}"


@asynccontextmanager
async def serve_process(backend: str) -> AsyncIterator[tuple[subprocess.Popen[str], str]]:
    proc, url, _ = await anyio.to_thread.run_sync(
        lambda: start("--grpc", "--backend", backend, "--grace", "1"))
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        await anyio.to_thread.run_sync(proc.wait)


async def test_a_server_killed_mid_stream_is_agent_unreachable(anyio_backend: str) -> None:
    async with serve_process(anyio_backend) as (proc, url), \
            A2AClient(url, transport="grpc") as client:
        began = 0.0
        with anyio.fail_after(15):
            with pytest.raises(TransportError) as caught:
                async with client.stream("slow 30") as events:
                    async for event in events:
                        if event.kind == "task" and not began:
                            proc.send_signal(signal.SIGKILL)
                            began = time.perf_counter()
        assert isinstance(caught.value, AgentUnreachable), caught.value
        assert time.perf_counter() - began < 5
        print("killed mid-stream:", caught.value)
        # Once the process is gone, the next call opens a new connection, which fails at
        # once: nobody listens.
        await anyio.to_thread.run_sync(proc.wait)
        with anyio.fail_after(10), pytest.raises(AgentUnreachable, match="cannot reach"):
            await client.get_task("x")


async def test_a_card_with_a_grpc_url_that_answers_nothing_is_unreachable() -> None:
    card = decode_card(b'{"name": "x", "supportedInterfaces": [{"url": "127.0.0.1:1", '
                       b'"protocolBinding": "GRPC", "protocolVersion": "1.0"}]}')
    assert isinstance(card, AgentCard)
    async with A2AClient("http://127.0.0.1:1/", card=card, timeout=5) as client:
        assert await client.binding() == "grpc"
        with anyio.fail_after(10), pytest.raises(AgentUnreachable, match="cannot reach"):
            await client.get_task("x")
