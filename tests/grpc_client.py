"""A plain grpcio client for the gRPC tests: a2a-sdk's generated ``A2AServiceStub`` (protoc's
output for the same ``a2a.proto``) on a blocking channel, driven from a worker thread so that
one test body runs on asyncio and on trio alike."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import grpc
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2, status_pb2

T = TypeVar("T")
V1 = (("a2a-version", "1.0"),)


def target(url: str) -> str:
    """``http://127.0.0.1:PORT/`` -> ``127.0.0.1:PORT`` (what a gRPC channel dials)."""
    return url.split("//", 1)[1].rstrip("/")


def message(text: str, **fields: Any) -> pb.Message:
    return pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER,
                      parts=[pb.Part(text=text)], **fields)


def send_request(text: str, *, metadata: dict[str, Any] | None = None,
                 **configuration: Any) -> pb.SendMessageRequest:
    req = pb.SendMessageRequest(message=message(text))
    if configuration:
        req.configuration.CopyFrom(pb.SendMessageConfiguration(**configuration))
    if metadata:
        meta = struct_pb2.Struct()
        meta.update(metadata)
        req.metadata.CopyFrom(meta)
    return req


def state(task: pb.Task) -> str:
    return str(pb.TaskState.Name(task.status.state))


def error_info(err: grpc.RpcError) -> tuple[str, list[tuple[str, str]]]:
    """The status code name and the ErrorInfo (reason, domain) pairs of a failed call."""
    trailers = dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    infos = []
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            infos.append((info.reason, info.domain))
    assert status.code == err.code().value[0]  # type: ignore[attr-defined]
    return err.code().name, infos  # type: ignore[attr-defined]


class Stub:
    """One channel (one HTTP/2 connection) to the server at ``url``."""

    def __init__(self, url: str, *, metadata: tuple[tuple[str, str], ...] = V1,
                 credentials: grpc.ChannelCredentials | None = None,
                 options: list[tuple[str, Any]] | None = None) -> None:
        if credentials is None:
            self.channel = grpc.insecure_channel(target(url), options=options)
        else:
            self.channel = grpc.secure_channel(target(url), credentials, options=options)
        self.stub = pb_grpc.A2AServiceStub(self.channel)
        self.metadata = metadata

    def call(self, method: str, request: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("metadata", self.metadata)
        kwargs.setdefault("timeout", 20)
        return getattr(self.stub, method)(request, **kwargs)

    async def __call__(self, method: str, request: Any, **kwargs: Any) -> Any:
        """The call, blocking in a worker thread."""
        return await in_thread(lambda: self.call(method, request, **kwargs))

    async def fails(self, method: str, request: Any, **kwargs: Any) -> grpc.RpcError:
        """The call's error (it must fail)."""
        def run() -> grpc.RpcError:
            try:
                answer = self.call(method, request, **kwargs)
                if hasattr(answer, "__next__"):  # a stream fails as it is read
                    list(answer)
            except grpc.RpcError as err:
                return err
            raise AssertionError(f"{method} did not fail")
        return await in_thread(run)

    async def stream(self, method: str, request: Any, **kwargs: Any) -> list[Any]:
        """Every message of a server-streaming call, until it ends."""
        return await in_thread(lambda: list(self.call(method, request, **kwargs)))

    def close(self) -> None:
        self.channel.close()


async def in_thread(work: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, serialized (for hand-made wire bytes)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def varint(value: int) -> bytes:
    """A protobuf base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
