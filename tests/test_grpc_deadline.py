"""``grpc-timeout`` ends every gRPC call at its deadline, on the server, on both backends.

grpcio enforces a deadline on the client side too (it cancels the call itself), so these tests
speak raw HTTP/2: the client sends ``grpc-timeout`` and then waits as long as the server lets it.

- SubscribeToTask to a task that goes on working: the snapshot, then, at the deadline, the
  stream ends with ``grpc-status: 4`` (DEADLINE_EXCEEDED) and a message saying what to do; the
  run goes on (it is detached) and the server keeps serving (a real ``serve --grpc`` process).
- A unary method that has not answered by its deadline: DEADLINE_EXCEEDED the same way.
- A send keeps its rule: the deadline is the run's (the deadline extension's budget), so the
  answer is the task, canceled with reason ``deadline``, status OK.
- A malformed ``grpc-timeout`` is ignored, as before: the call runs without a deadline.
- A deadline that falls inside a message (a client that stopped reading) resets the stream.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import anyio
import grpc
import h2.events
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.method import Call, Output

from .grpc_client import target
from .h2client import RawH2
from .helpers import served
from .test_cli import start, stopped_cleanly

SERVICE = "/lf.a2a.v1.A2AService/"


@dataclass
class Answer:
    """A raw gRPC call's answer: its messages, headers and trailers, when it ended."""

    messages: list[bytes] = field(default_factory=list)
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    reset: bool = False
    took: float = 0.0

    @property
    def status(self) -> int:
        return int(self.trailers[b"grpc-status"])

    @property
    def text(self) -> str:
        return self.trailers.get(b"grpc-message", b"").decode()


def raw_call(url: str, method: str, message: bytes, headers: list[tuple[str, str]],
             wait: float = 20.0) -> Answer:
    """One gRPC call on a raw HTTP/2 connection that never gives up by itself (within
    ``wait``): every message the server sends, and how the stream ended."""
    client = RawH2(int(url.rstrip("/").rsplit(":", 1)[1]), timeout=wait)
    answer = Answer()
    began = time.monotonic()
    try:
        stream = client.start(SERVICE + method, "POST", end_stream=False, extra=[
            ("content-type", "application/grpc"), ("te", "trailers"), *headers])
        client.conn.send_data(stream, b"\0" + len(message).to_bytes(4, "big") + message,
                              end_stream=True)
        client.flush()
        buffered = b""
        while True:
            data = client.sock.recv(65536)
            assert data, "the server closed the connection"
            for event in client.conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    client.conn.acknowledge_received_data(event.flow_controlled_length,
                                                          event.stream_id)
                    buffered += event.data
                    while len(buffered) >= 5:
                        size = int.from_bytes(buffered[1:5], "big")
                        if len(buffered) < 5 + size:
                            break
                        answer.messages.append(buffered[5:5 + size])
                        buffered = buffered[5 + size:]
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    answer.trailers.update(dict(event.headers))
                if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    answer.reset = isinstance(event, h2.events.StreamReset)
                    answer.took = time.monotonic() - began
                    assert not buffered, "the stream ended inside a message"
                    return answer
            client.flush()
    finally:
        client.close()


def detached_slow_task(url: str, text: str = "slow 30") -> str:
    """A task the demo agent works on for 30 s, detached (the sender does not hold it)."""
    meta = struct_pb2.Struct()
    meta.update({"onDisconnect": "continue"})
    req = pb.SendMessageRequest(
        message=pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER,
                           parts=[pb.Part(text=text)]),
        configuration=pb.SendMessageConfiguration(return_immediately=True), metadata=meta)
    with grpc.insecure_channel(target(url)) as channel:
        task = pb_grpc.A2AServiceStub(channel).SendMessage(req, timeout=10).task
    return str(task.id)


def get_task(url: str, task_id: str) -> pb.Task:
    with grpc.insecure_channel(target(url)) as channel:
        return pb_grpc.A2AServiceStub(channel).GetTask(pb.GetTaskRequest(id=task_id),
                                                        timeout=10)


@pytest.fixture(params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A ``serve --grpc`` process (the demo agent) on ``request.param``; its URL.

    Its grace is short: the tests leave a 30 s detached task running, which shutdown cancels
    once the grace is over, so a longer grace only adds to each test's teardown."""
    proc, url, log = start("--grpc", "--backend", request.param, "--grace", "0.2")
    try:
        yield url
    finally:
        stopped_cleanly(proc, log)


def test_a_subscription_ends_with_deadline_exceeded_at_its_grpc_timeout(server: str) -> None:
    task_id = detached_slow_task(server)
    answer = raw_call(server, "SubscribeToTask",
                      pb.SubscribeToTaskRequest(id=task_id).SerializeToString(),
                      [("grpc-timeout", "500m")])
    assert not answer.reset
    assert answer.status == 4, answer.trailers  # DEADLINE_EXCEEDED
    assert "grpc-timeout (0.5 s)" in answer.text and "subscribe again" in answer.text
    # The messages sent before the deadline are whole and come first: the task snapshot.
    first = pb.StreamResponse.FromString(answer.messages[0])
    assert first.WhichOneof("payload") == "task" and first.task.id == task_id
    assert 0.45 < answer.took < 5, answer.took  # at the deadline, not at the task's end (30 s)
    # The detached run goes on, and the server serves on.
    assert get_task(server, task_id).status.state == pb.TASK_STATE_WORKING
    # A deadline that does not pass changes nothing: a unary call within it answers OK.
    ok = raw_call(server, "GetTask", pb.GetTaskRequest(id=task_id).SerializeToString(),
                  [("grpc-timeout", "10S")])
    assert ok.status == 0 and pb.Task.FromString(ok.messages[0]).id == task_id


def test_a_deadline_inside_a_message_resets_the_stream(server: str) -> None:
    """A subscriber that grants a 1 KiB window and reads nothing: the 300 KB snapshot is still
    being written at the deadline, and trailers after part of a message would corrupt the
    stream, so it is reset (RST_STREAM) at the deadline rather than left waiting for the
    client's window (up to the 30 s write timeout); the server serves on."""
    task_id = detached_slow_task(server, "slow 30 " + "x" * 300_000)
    client = RawH2(int(server.rstrip("/").rsplit(":", 1)[1]), window=1024, timeout=10)
    try:
        began = time.monotonic()
        stream = client.start(SERVICE + "SubscribeToTask", "POST", end_stream=False, extra=[
            ("content-type", "application/grpc"), ("te", "trailers"),
            ("grpc-timeout", "500m")])
        message = pb.SubscribeToTaskRequest(id=task_id).SerializeToString()
        client.conn.send_data(stream, b"\0" + len(message).to_bytes(4, "big") + message,
                              end_stream=True)
        client.flush()
        ended = None
        while ended is None:  # no window granted: DATA is read, never acknowledged
            data = client.sock.recv(65536)
            assert data, "the server closed the connection"
            for event in client.conn.receive_data(data):
                if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)) and \
                        event.stream_id == stream:
                    ended = event
        took = time.monotonic() - began
    finally:
        client.close()
    assert isinstance(ended, h2.events.StreamReset), ended
    assert 0.45 < took < 5, took
    assert get_task(server, task_id).status.state == pb.TASK_STATE_WORKING


def test_a_send_answers_its_canceled_task_at_its_grpc_timeout(server: str) -> None:
    """Sends keep their rule: ``grpc-timeout`` is the run's deadline, so the call's answer is
    the task as the deadline left it (canceled, reason ``deadline``), with status OK."""
    req = pb.SendMessageRequest(message=pb.Message(
        message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[pb.Part(text="slow 30")]))
    answer = raw_call(server, "SendMessage", req.SerializeToString(),
                      [("grpc-timeout", "500m")])
    assert answer.status == 0, answer.trailers
    task = pb.SendMessageResponse.FromString(answer.messages[0]).task
    assert task.status.state == pb.TASK_STATE_CANCELED
    assert task.status.message.metadata["reason"] == "deadline"
    assert 0.45 < answer.took < 5, answer.took


def test_a_malformed_grpc_timeout_is_ignored(server: str) -> None:
    task_id = detached_slow_task(server)
    for value in ("5X", "123456789S", "-1S", "S", "1.5S"):
        answer = raw_call(server, "GetTask",
                          pb.GetTaskRequest(id=task_id).SerializeToString(),
                          [("grpc-timeout", value)])
        assert answer.status == 0, (value, answer.trailers)


async def agent(ctx: RunContext) -> str:
    return "done"


@pytest.mark.anyio
async def test_a_unary_call_unanswered_at_its_deadline_is_deadline_exceeded() -> None:
    """A method that has not answered by the deadline (here a GetTask made to wait) is
    cancelled and the call ends DEADLINE_EXCEEDED; the server's other calls are served."""
    app = A2AApp(agent, grpc=True, grace=1.0)
    waited: list[bool] = []

    async def stuck(call: Call, out: Output) -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            waited.append(True)
            raise

    app.methods.table["GetTask"] = stuck
    async with served(app) as url:
        answer = await anyio.to_thread.run_sync(lambda: raw_call(
            url, "GetTask", pb.GetTaskRequest(id="x").SerializeToString(),
            [("grpc-timeout", "300m")]))
        assert answer.status == 4, answer.trailers
        assert not answer.messages
        assert "not answered within its grpc-timeout (0.3 s)" in answer.text
        assert 0.25 < answer.took < 5, answer.took
        assert waited == [True]  # the method was cancelled, not left running
        listed = await anyio.to_thread.run_sync(lambda: raw_call(
            url, "ListTasks", pb.ListTasksRequest().SerializeToString(), []))
        assert listed.status == 0, listed.trailers
