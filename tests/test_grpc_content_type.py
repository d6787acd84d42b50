"""Which content types the gRPC binding decodes, against a real ``serve --grpc`` process on
both backends, spoken to by a raw HTTP/2 client.

The binding matched ``content-type`` by prefix, so ``application/grpcx``,
``application/grpc+json`` and ``application/grpc+xml`` were decoded as protobuf and answered
as if they were gRPC calls. Only ``application/grpc`` and ``application/grpc+proto`` (with
parameters) are decoded now; every other gRPC-family type is refused with HTTP 415, the
message in the body and in ``grpc-message`` (``grpc-status`` UNIMPLEMENTED), docs/grpc.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

import h2.events
import pytest
from a2a.types import a2a_pb2 as pb

from scoped_a2a.protocol.grpc.framing import frame

from .h2client import RawH2
from .test_h2_hostile import BACKENDS, server_process, stop

PATH = "/lf.a2a.v1.A2AService/SendMessage"


def _send(port: int, content_type: str, text: str) -> tuple[dict[bytes, bytes], bytes]:
    """One SendMessage with ``content_type``: every header and trailer of the answer, and its
    body."""
    body = frame(pb.SendMessageRequest(message=pb.Message(
        message_id=f"m-{text}", role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    ).SerializeToString())
    client = RawH2(port)
    try:
        stream = client.start(PATH, "POST", end_stream=False, extra=[
            ("content-type", content_type), ("te", "trailers"), ("a2a-version", "1.0")])
        events: list[Any] = client.send_body(stream, body, end_stream=True)
        events += client.read_events(10, until=lambda evs: any(
            isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset))
            and e.stream_id == stream for e in evs))
    finally:
        client.close()
    headers: dict[bytes, bytes] = {}
    data = b""
    for event in events:
        if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
            headers.update(dict(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            data += event.data
    return headers, data


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.one_python  # suite time: content-type decoding does not change with the Python version
def test_only_grpc_and_grpc_proto_are_decoded(backend: str, tmp_path: Path) -> None:
    with server_process(backend, tmp_path, "--grpc") as (proc, port, log):
        for ctype in ("application/grpc", "application/grpc+proto",
                      "application/grpc+proto; charset=utf-8", "Application/GRPC"):
            headers, data = _send(port, ctype, "hi")
            assert headers[b":status"] == b"200", (ctype, headers)
            assert headers[b"grpc-status"] == b"0", (ctype, headers)
            reply = pb.SendMessageResponse.FromString(data[5:])
            assert reply.task.id or reply.message.message_id, ctype
        for ctype in ("application/grpcx", "application/grpc+json", "application/grpc+xml",
                      "application/grpc+json; charset=utf-8"):
            headers, data = _send(port, ctype, "hi")
            assert headers[b":status"] == b"415", (ctype, headers)
            assert headers[b"grpc-status"] == b"12", (ctype, headers)  # UNIMPLEMENTED
            text = data.decode()
            assert ctype.partition(";")[0] in text and "application/grpc+proto" in text, text
            assert unquote(headers[b"grpc-message"].decode()) == text
        stop(proc, log)
