"""A hostile gRPC client against a real ``serve --grpc --api-keys`` process, on both backends.

Findings of the hostile-client probe of the gRPC binding, each with its test:

- Trailers that echo the caller: an error message names what the caller sent (a task id, a
  header). A GetTask for a 1 MiB id was answered NOT_FOUND with that id in ``grpc-message``
  and again in ``grpc-status-details-bin``, and HPACK-encoding a header that large takes the
  h2 package minutes of CPU (it is quadratic), so one call froze the event loop and every
  other connection with it. Status messages are now capped.
- A message flagged compressed with no ``grpc-encoding`` was refused with "grpc-encoding
  identity is not supported; send identity or gzip", which contradicts itself.
- A gzip message inflating past the body limit was INVALID_ARGUMENT; a message sent that
  large is RESOURCE_EXHAUSTED (docs/grpc.md's table), and so is this one now.
- A large request message of many tiny fields stalled every other caller: 8 MB of 400,000
  metadata entries held the event loop about 1.5 s (protobuf decoding, in C under the GIL and
  in Python). The binding now counts a message's fields on the wire before decoding it
  (protocol/grpc/census.py) and refuses one past the cap (100,000 fields by default,
  ``--grpc-max-fields``) with RESOURCE_EXHAUSTED; nesting past protobuf's limit of 100 is
  INVALID_ARGUMENT, before anything is decoded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc as pb_grpc

from .grpc_client import field, target
from .test_cli import StderrLog, start, stopped_cleanly

KEYS = "alice:alicetoken\nbob:bobtoken\n"
ALICE = (("a2a-version", "1.0"), ("authorization", "Bearer alicetoken"))


@pytest.fixture(params=["trio", "asyncio"])
def server(request: pytest.FixtureRequest,
           tmp_path: Path) -> Iterator[tuple[str, StderrLog]]:
    """A ``serve --grpc --api-keys`` process on ``request.param``; its URL and log. A server
    that does not stop within its grace is killed, so a frozen one fails the test, not CI."""
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS)
    proc, url, log = start("--grpc", "--backend", request.param, "--api-keys", str(keys),
                           "--grace", "1")
    try:
        yield url, log
    finally:
        stopped_cleanly(proc, log)


def stub(url: str) -> tuple[grpc.Channel, pb_grpc.A2AServiceStub]:
    # The client must accept the answer's trailers whatever their size, so that what is
    # measured is the server's side.
    channel = grpc.insecure_channel(target(url), options=[
        ("grpc.max_metadata_size", 64 << 20), ("grpc.max_send_message_length", 16 << 20),
        ("grpc.max_receive_message_length", 64 << 20)])
    return channel, pb_grpc.A2AServiceStub(channel)


def test_an_error_echoing_a_huge_id_is_answered_at_once_and_freezes_nothing(
        server: tuple[str, StderrLog]) -> None:
    url, _ = server
    channel, api = stub(url)
    with channel:
        began = time.monotonic()
        with pytest.raises(grpc.RpcError) as failed:
            api.GetTask(pb.GetTaskRequest(id="x" * (1 << 20)), metadata=ALICE, timeout=10)
        took = time.monotonic() - began
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND, failed.value
        text = failed.value.details() or ""
        assert "not found" in text and len(text) <= 1024, len(text)
        trailers = dict(failed.value.trailing_metadata() or ())
        assert sum(len(k) + len(v) for k, v in trailers.items()) < 4096
        assert took < 3, took
        # ... and the server serves on, this connection and others.
        with pytest.raises(grpc.RpcError) as other:
            api.GetTask(pb.GetTaskRequest(id="nope"), metadata=ALICE, timeout=5)
        assert other.value.code() == grpc.StatusCode.NOT_FOUND


def raw_call(url: str, path: str, body: bytes,
             headers: list[tuple[str, str]]) -> dict[bytes, bytes]:
    """One call on a raw HTTP/2 connection; its trailers (or trailers-only headers)."""
    import h2.events

    from .h2client import RawH2

    client = RawH2(int(url.rstrip("/").rsplit(":", 1)[1]), timeout=10)
    try:
        stream = client.start(path, "POST", end_stream=False, extra=[
            ("content-type", "application/grpc"), ("te", "trailers"), *headers])
        size = client.conn.max_outbound_frame_size  # a body within the initial window only
        for at in range(0, len(body), size):
            client.conn.send_data(stream, body[at:at + size],
                                  end_stream=at + size >= len(body))
        client.flush()
        answer: dict[bytes, bytes] = {}
        while True:
            data = client.sock.recv(65536)
            assert data, "the server closed the connection"
            for event in client.conn.receive_data(data):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    answer.update(dict(event.headers))
                if isinstance(event, h2.events.StreamEnded):
                    return answer
    finally:
        client.close()


def test_a_message_flagged_compressed_without_an_encoding_is_refused_plainly(
        server: tuple[str, StderrLog]) -> None:
    url, _ = server
    message = pb.GetTaskRequest(id="nope").SerializeToString()
    body = b"\x01" + len(message).to_bytes(4, "big") + message
    auth = [("authorization", "Bearer alicetoken")]
    for encoding in ([], [("grpc-encoding", "identity")]):
        trailers = raw_call(url, "/lf.a2a.v1.A2AService/GetTask", body, auth + encoding)
        assert trailers[b"grpc-status"] == b"13", trailers  # INTERNAL, as the gRPC spec says
        text = trailers[b"grpc-message"].decode()
        assert "compressed" in text and "not supported" not in text, text
    trailers = raw_call(url, "/lf.a2a.v1.A2AService/GetTask", body,
                        [*auth, ("grpc-encoding", "snappy")])
    assert trailers[b"grpc-status"] == b"12", trailers
    assert "snappy" in trailers[b"grpc-message"].decode()


def many_fields(entries: int) -> pb.SendMessageRequest:
    """A SendMessageRequest whose metadata holds ``entries`` tiny numbers (4 fields each)."""
    import uuid

    from google.protobuf import struct_pb2

    meta = struct_pb2.Struct()
    for i in range(entries):
        meta.fields[str(i)].number_value = 1
    return pb.SendMessageRequest(metadata=meta, message=pb.Message(
        message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[pb.Part(text="hello")]))


def send_while_probing(url: str, request: pb.SendMessageRequest) -> tuple[object, float, float]:
    """Send ``request`` from a thread while another caller's GetTask probes the server over
    and over; the send's outcome (response or RpcError), how long it took, and the longest
    any probe waited."""
    import threading

    outcome: list[object] = []
    took: list[float] = []

    def send() -> None:
        channel, api = stub(url)
        with channel:
            began = time.monotonic()
            try:
                outcome.append(api.SendMessage(request, metadata=ALICE, timeout=60))
            except grpc.RpcError as exc:
                outcome.append(exc)
            took.append(time.monotonic() - began)

    channel, api = stub(url)
    with channel:
        def probe() -> None:
            with pytest.raises(grpc.RpcError) as missing:
                api.GetTask(pb.GetTaskRequest(id="nope"), metadata=ALICE, timeout=30)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND

        probe()
        sender = threading.Thread(target=send)
        sender.start()
        worst = 0.0
        while sender.is_alive():
            began = time.monotonic()
            probe()
            worst = max(worst, time.monotonic() - began)
            time.sleep(0.01)
        sender.join()
    return outcome[0], took[0], worst


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
def test_a_large_request_message_of_tiny_fields_is_refused_and_stalls_no_one(
        server: tuple[str, StderrLog]) -> None:
    """An 8 MB SendMessageRequest of 400,000 tiny metadata entries (1.6 million fields, within
    the default body limit) stalled every other call about 1.5 s while it was decoded. Now
    its fields are counted on the wire first and it is refused at the cap (100,000): about
    0.03 s of the event loop, whatever the message's size."""
    url, _ = server
    outcome, took, worst = send_while_probing(url, many_fields(400_000))
    assert isinstance(outcome, grpc.RpcError), outcome
    assert outcome.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, outcome
    text = outcome.details() or ""
    assert "more than 100000 protobuf fields" in text and "file part" in text, text
    assert took < 5, took  # the whole call: 8 MB to send and the refusal
    assert worst < 0.75, worst


def test_a_message_just_under_the_field_cap_is_served(server: tuple[str, StderrLog]) -> None:
    from scoped_a2a.protocol.grpc.census import count_fields
    from scoped_a2a.protocol.grpc.messages import methods

    url, _ = server
    request = many_fields(24_990)
    fields = count_fields(request.SerializeToString(),
                          methods()["SendMessage"].request.DESCRIPTOR, 10**9)
    assert 99_900 < fields <= 100_000, fields
    outcome, _, worst = send_while_probing(url, request)
    assert isinstance(outcome, pb.SendMessageResponse), outcome
    assert outcome.task.id and outcome.task.status.state == pb.TASK_STATE_COMPLETED
    assert worst < 0.75, worst


def _nested_value(levels: int) -> bytes:
    """A serialized ``google.protobuf.Value`` nesting ``levels`` lists, built by hand (the
    protobuf runtime would not build one this deep)."""
    value = b"\x11" + bytes(8)  # number_value 0.0
    for _ in range(levels):
        value = field(6, field(1, value))  # Value.list_value -> ListValue.values
    return value


def test_a_deeply_nested_value_is_refused_cleanly(server: tuple[str, StderrLog]) -> None:
    """Lists nested 5,000 deep in a request's metadata, and one level past protobuf's limit
    of 100 messages: INVALID_ARGUMENT naming the nesting, no RecursionError, no 500; one level
    less is served."""
    url, log = server
    message = pb.Message(message_id="m-deep", role=pb.ROLE_USER,
                         parts=[pb.Part(text="hello")])
    head = pb.SendMessageRequest(message=message).SerializeToString()

    def with_metadata(levels: int) -> bytes:
        entry = field(1, b"k") + field(2, _nested_value(levels))  # key, value
        number = pb.SendMessageRequest.DESCRIPTOR.fields_by_name["metadata"].number
        return head + field(number, field(1, entry))  # Struct.fields: one entry

    auth = [("authorization", "Bearer alicetoken")]
    for levels in (5_000, 49):  # request, Struct, entry, Value: 4; then 2 a level
        body = with_metadata(levels)
        trailers = raw_call(url, "/lf.a2a.v1.A2AService/SendMessage",
                            b"\0" + len(body).to_bytes(4, "big") + body, auth)
        assert trailers[b"grpc-status"] == b"3", trailers  # INVALID_ARGUMENT
        assert b"nests messages more than 100 deep" in trailers[b"grpc-message"], trailers
    channel, _ = stub(url)
    with channel:
        call = channel.unary_unary("/lf.a2a.v1.A2AService/SendMessage")
        answer = pb.SendMessageResponse.FromString(call(with_metadata(48), metadata=ALICE,
                                                        timeout=10))
    assert answer.task.status.state == pb.TASK_STATE_COMPLETED
    assert "RecursionError" not in log.text()


def test_a_gzip_bomb_is_resource_exhausted_like_any_message_too_large(
        server: tuple[str, StderrLog]) -> None:
    """A 50 KB gzip message inflating to 50 MB: refused once past the body limit (8 MiB) with
    the status a too-large message gets (it was INVALID_ARGUMENT), and nothing more inflated."""
    import gzip

    url, _ = server
    bomb = gzip.compress(b"\n" * (50 << 20))
    assert len(bomb) < 65535  # within HTTP/2's initial window: raw_call sends it at once
    trailers = raw_call(url, "/lf.a2a.v1.A2AService/SendMessage",
                        b"\x01" + len(bomb).to_bytes(4, "big") + bomb,
                        [("authorization", "Bearer alicetoken"), ("grpc-encoding", "gzip")])
    assert trailers[b"grpc-status"] == b"8", trailers  # RESOURCE_EXHAUSTED
    assert b"inflates to more than" in trailers[b"grpc-message"]
    channel, api = stub(url)
    with channel:
        with pytest.raises(grpc.RpcError) as other:
            api.GetTask(pb.GetTaskRequest(id="nope"), metadata=ALICE, timeout=5)
        assert other.value.code() == grpc.StatusCode.NOT_FOUND
