"""Shutdown of a real ``python -m scoped_a2a serve`` process: every waiting caller is answered.

SIGINT while four runs are in flight (a blocking send, a stream, a detached run, a run parked in
``ctx.ask``): new sends on an open keep-alive connection get -32000, the runs left at the end of
the grace period are cancelled with reason ``shutdown``, the blocking caller gets the canceled
task as its JSON-RPC result, the stream gets the final status event and then ends, the process
exits within grace + 1 s, and its stderr holds no traceback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import ByteReceiveStream, Process, SocketStream

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


class ServerLog:
    """The server's stderr, collected by a task of the test's group."""

    def __init__(self) -> None:
        self.text = ""
        self.closed = False

    async def collect(self, stream: ByteReceiveStream) -> None:
        async for chunk in stream:
            self.text += chunk.decode(errors="replace")
        self.closed = True

    async def wait_for(self, pattern: str, timeout: float = 20) -> re.Match[str]:
        """The first match of ``pattern`` (fails if the log ends first or time is up)."""
        with anyio.move_on_after(timeout):
            while True:
                match = re.search(pattern, self.text)
                if match:
                    return match
                if self.closed:
                    break
                await anyio.sleep(0.02)
        raise AssertionError(f"no {pattern!r} in the server's log:\n{self.text}")

    def run_end(self, task_id: str) -> str:
        match = re.search(rf"run end task={task_id} (.*)", self.text)
        assert match, f"no run end for {task_id}:\n{self.text}"
        return match.group(1)


class KeepAliveConnection:
    """One raw HTTP/1.1 connection, reused for every request (no hidden reconnects)."""

    def __init__(self, stream: SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host
        self.buffer = b""

    async def request(self, method: str, body: dict[str, Any] | None = None,
                      path: str = "/") -> tuple[int, bytes]:
        payload = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nA2A-Version: 1.0\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        await self.stream.send(head.encode() + b"\r\n" + payload)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += await self.stream.receive()
        raw_head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = raw_head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        pairs = (line.partition(":") for line in lines[1:])
        headers = {k.strip().lower(): v.strip() for k, _, v in pairs}
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            self.buffer += await self.stream.receive()
        data, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, data


def send_body(text: str, method: str = "SendMessage", **configuration: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                                          "parts": [{"text": text}]}}
    if configuration:
        params["configuration"] = configuration
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def start_server(backend: str, grace: float, log: ServerLog,
                       tg: anyio.abc.TaskGroup) -> tuple[Process, str]:
    env = {**os.environ,
           "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = await anyio.open_process(
        [sys.executable, "-m", "scoped_a2a", "serve", "--backend", backend, "--port", "0",
         "--grace", str(grace)],
        cwd=ROOT, env=env, stdin=None, stdout=None)
    assert proc.stderr is not None
    tg.start_soon(log.collect, proc.stderr)
    url = (await log.wait_for(r"serving on (http://\S+)")).group(1)
    return proc, url


async def wait_exit(proc: Process, timeout: float = 30) -> None:
    with anyio.move_on_after(timeout):
        await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the server did not exit within {timeout} s of the signal")


def assert_canceled_by_shutdown(task: dict[str, Any]) -> None:
    status = task["status"]
    assert status["state"] == "TASK_STATE_CANCELED", task
    assert status["message"]["metadata"] == {"reason": "shutdown"}, task


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_sigint_answers_every_waiting_caller_with_its_final_task(
        anyio_backend: str) -> None:
    grace = 2.0
    log = ServerLog()
    answers: dict[str, Any] = {}
    answered_at: dict[str, float] = {}
    stream_events: list[dict[str, Any]] = []
    stream_working = anyio.Event()
    async with anyio.create_task_group() as tg:
        proc, url = await start_server(anyio_backend, grace, log, tg)
        try:
            host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
            raw = KeepAliveConnection(await anyio.connect_tcp(host, int(port)), f"{host}:{port}")
            async with raw.stream, httpx.AsyncClient(timeout=60) as client:
                status, _ = await raw.request("GET", path="/.well-known/agent-card.json")
                assert status == 200  # the keep-alive connection is open and idle

                async def blocking() -> None:
                    r = await client.post(url, json=send_body("slow 30"))
                    answered_at["blocking"] = time.monotonic()
                    answers["blocking"] = r.json()

                async def streaming() -> None:
                    async with client.stream(
                            "POST", url, json=send_body("slow 30", "SendStreamingMessage"),
                            headers={"A2A-Version": "1.0"}) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data:"):
                                stream_events.append(json.loads(line[5:]))
                                if "statusUpdate" in stream_events[-1].get("result", {}):
                                    stream_working.set()
                    answered_at["stream"] = time.monotonic()

                tg.start_soon(blocking)
                tg.start_soon(streaming)
                detached = (await client.post(url, json=send_body(
                    "slow 30", returnImmediately=True))).json()["result"]["task"]
                parked = (await client.post(url, json=send_body("ask"))).json()["result"]["task"]
                assert parked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
                with anyio.fail_after(20):
                    await stream_working.wait()
                    while log.text.count("run start task=") < 4:
                        await anyio.sleep(0.02)

                proc.send_signal(signal.SIGINT)
                signalled = time.monotonic()
                await log.wait_for(r"SIGINT: shutting down gracefully")
                # The run parked in ctx.ask is cancelled at once: no one may answer it now.
                await log.wait_for(rf"run end task={parked['id']} ")
                status, data = await raw.request("POST", send_body("too late"))
                assert status == 200
                refused = json.loads(data)
                assert refused["error"]["code"] == -32000, refused
                assert "shutting down" in refused["error"]["message"]
                with anyio.fail_after(grace + 10):
                    while len(answered_at) < 2:
                        await anyio.sleep(0.01)
            await wait_exit(proc)
            exited = time.monotonic()
        finally:
            if proc.returncode is None:
                proc.kill()
    err = log.text
    print(f"\n[{anyio_backend}] grace {grace:g}: signal -> callers answered "
          f"{max(answered_at.values()) - signalled:.2f} s, -> exit {exited - signalled:.2f} s")

    assert proc.returncode == 0, err
    result = answers["blocking"]["result"]["task"]
    assert_canceled_by_shutdown(result)
    final = stream_events[-1]["result"]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_CANCELED", stream_events[-1]
    assert final["metadata"] == {"reason": "shutdown"}
    for task_id in (result["id"], final["taskId"], detached["id"], parked["id"]):
        assert re.match(r"outcome=canceled .*reason=shutdown", log.run_end(task_id)), err
    assert answered_at["blocking"] - signalled >= grace - 0.5  # the run got its grace
    assert exited - signalled < grace + 1, err
    assert "Traceback" not in err and "CancelledError" not in err, err


async def test_runs_that_finish_within_grace_complete_normally(anyio_backend: str) -> None:
    grace = 3.0
    log = ServerLog()
    answers: dict[str, Any] = {}
    stream_events: list[dict[str, Any]] = []
    async with anyio.create_task_group() as tg:
        proc, url = await start_server(anyio_backend, grace, log, tg)
        try:
            async with httpx.AsyncClient(timeout=60) as client:

                async def blocking() -> None:
                    answers["blocking"] = (await client.post(url, json=send_body("slow 1"))).json()

                async def streaming() -> None:
                    async with client.stream(
                            "POST", url, json=send_body("slow 1", "SendStreamingMessage"),
                            headers={"A2A-Version": "1.0"}) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data:"):
                                stream_events.append(json.loads(line[5:]))
                    answers["stream"] = True

                async with anyio.create_task_group() as callers:
                    callers.start_soon(blocking)
                    callers.start_soon(streaming)
                    detached = (await client.post(url, json=send_body(
                        "slow 1", returnImmediately=True))).json()["result"]["task"]
                    with anyio.fail_after(20):
                        while log.text.count("run start task=") < 3:
                            await anyio.sleep(0.02)
                    proc.send_signal(signal.SIGINT)
                    signalled = time.monotonic()
            await wait_exit(proc)
            exited = time.monotonic()
        finally:
            if proc.returncode is None:
                proc.kill()
    err = log.text
    assert proc.returncode == 0, err
    result = answers["blocking"]["result"]["task"]
    assert result["status"]["state"] == "TASK_STATE_COMPLETED", result
    assert result["status"]["message"]["parts"][0]["text"] == "done after 1s"
    final = stream_events[-1]["result"]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED", stream_events[-1]
    for task_id in (result["id"], final["taskId"], detached["id"]):
        assert re.match(r"outcome=completed .*reason=completed", log.run_end(task_id)), err
    # The runs took about 1 s of the 3 s grace; the server did not wait out the rest.
    assert exited - signalled < grace, err
    assert "Traceback" not in err and "CancelledError" not in err, err


async def test_a_second_sigint_skips_the_grace_and_still_answers(anyio_backend: str) -> None:
    grace = 30.0
    log = ServerLog()
    answers: dict[str, Any] = {}
    stream_events: list[dict[str, Any]] = []
    async with anyio.create_task_group() as tg:
        proc, url = await start_server(anyio_backend, grace, log, tg)
        try:
            async with httpx.AsyncClient(timeout=60) as client:

                async def blocking() -> None:
                    answers["blocking"] = (await client.post(
                        url, json=send_body("slow 30"))).json()

                async def streaming() -> None:
                    async with client.stream(
                            "POST", url, json=send_body("slow 30", "SendStreamingMessage"),
                            headers={"A2A-Version": "1.0"}) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data:"):
                                stream_events.append(json.loads(line[5:]))
                    answers["stream"] = True

                async with anyio.create_task_group() as callers:
                    callers.start_soon(blocking)
                    callers.start_soon(streaming)
                    with anyio.fail_after(20):
                        while log.text.count("run start task=") < 2:
                            await anyio.sleep(0.02)
                    proc.send_signal(signal.SIGINT)
                    await log.wait_for(r"SIGINT: shutting down gracefully")
                    proc.send_signal(signal.SIGINT)  # stop now: the grace period is skipped
                    signalled = time.monotonic()
            await wait_exit(proc)
            exited = time.monotonic()
        finally:
            if proc.returncode is None:
                proc.kill()
    err = log.text
    assert proc.returncode == 0, err
    assert "second signal: stopping now" in err
    result = answers["blocking"]["result"]["task"]
    assert_canceled_by_shutdown(result)
    final = stream_events[-1]["result"]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_CANCELED", stream_events[-1]
    assert final["metadata"] == {"reason": "shutdown"}
    for task_id in (result["id"], final["taskId"]):
        assert re.match(r"outcome=canceled .*reason=shutdown", log.run_end(task_id)), err
    assert exited - signalled < 5, err  # not the 30 s grace
    assert "Traceback" not in err and "CancelledError" not in err, err


async def test_a_client_that_never_finishes_its_request_does_not_hold_up_shutdown(
        anyio_backend: str) -> None:
    from scoped_a2a.server.serve import ANSWER_SECONDS, STALL_SECONDS

    grace = 0.5
    log = ServerLog()
    answers: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        proc, url = await start_server(anyio_backend, grace, log, tg)
        try:
            host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
            async with await anyio.connect_tcp(host, int(port)) as stuck, \
                    httpx.AsyncClient(timeout=60) as client:
                # Promises 1000 bytes of body, sends 10, then neither sends nor reads.
                await stuck.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                                 b"\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\"")

                async def blocking() -> None:
                    answers["blocking"] = (await client.post(
                        url, json=send_body("slow 30"))).json()

                async with anyio.create_task_group() as callers:
                    callers.start_soon(blocking)
                    await log.wait_for(r"run start task=")
                    proc.send_signal(signal.SIGINT)
                    signalled = time.monotonic()
                await wait_exit(proc)
                exited = time.monotonic()
        finally:
            if proc.returncode is None:
                proc.kill()
    err = log.text
    assert proc.returncode == 0, err
    assert_canceled_by_shutdown(answers["blocking"]["result"]["task"])
    # hypercorn closes the stuck connection ANSWER_SECONDS after the runs have ended; where its
    # asyncio worker hangs instead (Python 3.12+, hypercorn #308), serve stops it STALL_SECONDS
    # later.
    bound = grace + ANSWER_SECONDS + STALL_SECONDS + 2
    assert exited - signalled < bound, err
    assert "Traceback" not in err and "CancelledError" not in err, err


async def test_a_follow_up_to_a_parked_run_is_refused_once_shutdown_begins() -> None:
    """In process: follow-ups are refused like new sends, so parked runs may end at once."""
    from scoped_a2a import A2AApp
    from scoped_a2a.agents.demo import demo_agent

    from .helpers import rpc, served, text_message

    app = A2AApp(demo_agent, grace=1.0)
    async with served(app) as url, httpx.AsyncClient() as client:
        asked = (await rpc(client, url, "SendMessage", {"message": text_message("ask")}))
        task = asked["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        app.begin_shutdown()  # the drain has not cancelled the parked run yet
        follow = await rpc(client, url, "SendMessage", {
            "message": text_message("pineapple", taskId=task["id"])})
        assert follow["error"]["code"] == -32000, follow
        assert "shutting down" in follow["error"]["message"]
    ended, _ = await app.store.get(task["id"])
    assert ended.status.state.name == "CANCELED"
    assert ended.status.message is not None
    assert ended.status.message.metadata == {"reason": "shutdown"}


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_client_that_stops_reading_a_large_answer_does_not_hold_up_shutdown(
        backend: str) -> None:
    """An HTTP/2 client that grants no flow-control window, then asks for a 600 KB task: its
    answer's write waits on the window, shielded from hang-ups and bounded by the 30 s write
    timeout. SIGTERM used to wait that out on trio (exit after about 29 s). Final writes in
    flight at shutdown now get ``FINAL_WRITE_CLOSING`` (5 s) at most."""
    from .h2client import RawH2
    from .test_cli import start, stopped_cleanly

    proc, url, log = start("--http2", "--backend", backend, "--grace", "1")
    try:
        sent = httpx.post(url, json=send_body("x" * 600_000), timeout=10,
                          headers={"A2A-Version": "1.0"}).json()
        task_id = sent["result"]["task"]["id"]
        client = RawH2(int(url.rstrip("/").rsplit(":", 1)[1]), window=0)
        try:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                               "params": {"id": task_id}}).encode()
            stream = client.start("/", "POST", end_stream=False, extra=[
                ("content-type", "application/json"), ("a2a-version", "1.0")])
            client.conn.send_data(stream, body, end_stream=True)
            client.flush()
            client.read_events(1.0)  # the answer starts, then waits for a window
            began = time.monotonic()
            stopped_cleanly(proc, log)
            took = time.monotonic() - began
        finally:
            client.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 12, f"shutdown took {took:.1f} s"
