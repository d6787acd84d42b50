"""The A2A 1.0 protobuf messages, in a private descriptor pool, and their ProtoJSON (no I/O).

The messages come from the vendored ``a2a.proto`` (``lf.a2a.v1``) through the generated
descriptor set (:mod:`.a2a_descriptor`, written by ``scripts/gen_grpc.py``). They live in a pool
of their own, not protobuf's default one, so this module can be imported beside a2a-sdk's
generated ``a2a_pb2`` (which registers the same file and names there).

The gRPC binding only translates: a request message becomes ProtoJSON, the params the method
layer already takes from JSON-RPC and HTTP+JSON; the method's JSON answer becomes the response
message. Imports ``google.protobuf`` (the ``[grpc]`` extra); nothing else in the package does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import msgspec
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import Message

from .a2a_descriptor import FILE_DESCRIPTOR_SET
from .fill import fill

SERVICE = "lf.a2a.v1.A2AService"
"""The gRPC service name: requests arrive at ``/lf.a2a.v1.A2AService/<Method>``."""


@functools.cache
def pool() -> descriptor_pool.DescriptorPool:
    """The private pool holding a2a.proto, its imports and google.rpc's status protos."""
    files = descriptor_pb2.FileDescriptorSet.FromString(FILE_DESCRIPTOR_SET)
    built = descriptor_pool.DescriptorPool()
    for file in files.file:  # dependencies come first in protoc's --include_imports output
        built.Add(file)
    return built


def message_class(full_name: str) -> type[Message]:
    """The message class of ``full_name`` (``lf.a2a.v1.Task``) in the private pool."""
    return _classes(full_name)


@functools.cache
def _classes(full_name: str) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(
        pool().FindMessageTypeByName(full_name))
    return cls


@dataclass(frozen=True, slots=True)
class RpcMethod:
    """One method of ``A2AService``: its name (the method layer's too) and message types."""

    name: str
    request: type[Message]
    response: type[Message]
    streaming: bool


@functools.cache
def methods() -> dict[str, RpcMethod]:
    """Every method of ``A2AService`` by name, read from the service descriptor itself."""
    service = pool().FindServiceByName(SERVICE)
    return {
        m.name: RpcMethod(m.name, message_class(m.input_type.full_name),
                          message_class(m.output_type.full_name), m.server_streaming)
        for m in service.methods
    }


def to_json(message: Message) -> dict[str, Any]:
    """A message's ProtoJSON object (JSON field names, enum names, fields set only)."""
    value: dict[str, Any] = json_format.MessageToDict(message)
    return value


def from_json(text: bytes | str, cls: type[Message]) -> Message:
    """Parse ProtoJSON into ``cls``; fields the proto does not know are ignored (the card's
    0.3 fields, say). Raises ``json_format.ParseError`` for a value that does not fit.

    The answers this server writes take :func:`.fill`'s direct path (several times faster
    than ``json_format``, which was a third of a small call's CPU); anything that path does
    not expect is parsed again by ``json_format``, whose errors are the ones raised.
    """
    try:
        value = msgspec.json.decode(text)
        if isinstance(value, dict):
            message = cls()
            fill(message, value)
            return message
    except Exception:  # json_format below judges it, with its own error
        pass
    return json_format.Parse(text, cls(), ignore_unknown_fields=True)


def error_status(code: int, message: str, reason: str, domain: str,
                 metadata: dict[str, str] | None = None) -> bytes:
    """A serialized ``google.rpc.Status`` whose details hold one ``google.rpc.ErrorInfo``."""
    # Any: the classes are built from descriptors at run time, so no stub knows their fields.
    error_info: Any = message_class("google.rpc.ErrorInfo")
    status_cls: Any = message_class("google.rpc.Status")
    info = error_info(reason=reason, domain=domain, metadata=metadata or {})
    status = status_cls(code=code, message=message)
    status.details.add().Pack(info)
    serialized: bytes = status.SerializeToString()
    return serialized


def error_info_of(status_bytes: bytes) -> tuple[int, str, list[tuple[str, str]]]:
    """``(code, message, [(reason, domain), ...])`` of a serialized ``google.rpc.Status``
    (for tests and clients). Raises ``DecodeError`` for bytes that are not one."""
    status = message_class("google.rpc.Status").FromString(status_bytes)
    info_cls = message_class("google.rpc.ErrorInfo")
    infos = []
    for any_detail in status.details:  # type: ignore[attr-defined]
        info = info_cls()
        if any_detail.Unpack(info):
            infos.append((info.reason, info.domain))  # type: ignore[attr-defined]
    return status.code, status.message, infos  # type: ignore[attr-defined]


def request_bytes(params: bytes, cls: type[Message]) -> bytes:
    """The client's direction: a method's 1.0 JSON params as the serialized request message.
    Raises ``json_format.ParseError`` for params that do not fit the proto."""
    return from_json(params, cls).SerializeToString()


_encode = msgspec.json.Encoder().encode


def answer_json(data: bytes, cls: type[Message]) -> bytes:
    """The client's direction: a serialized response message as the JSON result the method
    answers on JSON-RPC (``google.protobuf.Empty`` is ``null``). Raises ``DecodeError``."""
    value = to_json(cls.FromString(data))
    if not value and cls.DESCRIPTOR.full_name == "google.protobuf.Empty":
        return b"null"
    return _encode(value)
