"""JSON-RPC 2.0 envelopes: parse a request body, build answers (no I/O).

Answers are assembled from pre-encoded pieces (``b'{"jsonrpc":"2.0","id":' ...``) so an event
encoded once in the task log is spliced into every subscriber's frame without re-encoding.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from .enum_hint import with_enum_values
from .errors import A2AError, InvalidParams, InvalidRequest, ParseError
from .protojson import decode_with_proto_names

T = TypeVar("T")

_encode = msgspec.json.Encoder().encode


class _Envelope(msgspec.Struct):
    jsonrpc: str
    method: str
    id: int | str | msgspec.UnsetType | None = msgspec.UNSET
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_envelope_decoder = msgspec.json.Decoder(_Envelope)


class RpcRequest(msgspec.Struct):
    id_json: bytes  # the id, encoded, ready to splice into the answer
    method: str
    params: msgspec.Raw | None
    has_id: bool = True
    """False for a request object without an ``id`` (a JSON-RPC notification in form). A2A has
    no notifications: the app answers such a request with an error whose ``id`` is null, the
    specific one (-32601, -32602) where there is one, else -32600."""


def _id_json(value: Any) -> bytes:
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return _encode(value)
    return b"null"


def parse_request(body: bytes) -> RpcRequest:
    """Parse one JSON-RPC request. Raises A2AError carrying ``id_json`` for the error answer."""
    try:
        return _parse_request(body)
    except RecursionError:
        # msgspec refuses JSON nested ~1000 deep with RecursionError, not DecodeError; without
        # this the app would crash on it (a 500).
        err = ParseError("the body nests JSON too deeply to be read")
        err.id_json = b"null"  # type: ignore[attr-defined]
        raise err from None


def _parse_request(body: bytes) -> RpcRequest:
    try:
        env = _envelope_decoder.decode(body)
    except msgspec.DecodeError as exc:
        try:
            value = msgspec.json.decode(body)
        except msgspec.DecodeError:
            err: A2AError = ParseError(f"the body is not valid JSON: {exc}")
            err.id_json = b"null"  # type: ignore[attr-defined]
            raise err from None
        if isinstance(value, list):
            err = InvalidRequest("batch requests are not supported; send one object")
        elif not isinstance(value, dict):
            err = InvalidRequest("the body must be a JSON-RPC request object")
        else:
            err = InvalidRequest(f"not a JSON-RPC 2.0 request: {exc}")
        err.id_json = _id_json(value.get("id") if isinstance(value, dict) else None)  # type: ignore[attr-defined]
        raise err from None
    id_json = _id_json(env.id)
    if env.jsonrpc != "2.0":
        err = InvalidRequest('"jsonrpc" must be "2.0"')
        err.id_json = id_json  # type: ignore[attr-defined]
        raise err
    params = None if env.params is msgspec.UNSET else env.params
    has_id = env.id is not msgspec.UNSET and env.id is not None
    return RpcRequest(id_json, env.method, params, has_id)


NO_ID = 'A2A has no notifications: give the request an "id" (a string or a number)'
"""The -32600 message for a request without an id whose method and params are fine."""


def decode_params(params: msgspec.Raw | None, type_: type[T]) -> T:
    """Decode and validate a method's params; InvalidParams names the offending field.

    Field names may be the JSON names (``taskId``) or the proto names (``task_id``), as ProtoJSON
    parsers accept both (:mod:`.protojson`).
    """
    raw = bytes(params) if params is not None else b"null"
    if raw.strip() == b"null":
        raise InvalidParams("this method needs params (a JSON object)")
    try:
        decoded: T = decode_with_proto_names(raw, type_)
        return decoded
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidParams(f"invalid params: {with_enum_values(str(exc), type_)}") from None
    except RecursionError:
        raise InvalidParams("invalid params: nested too deeply to be read") from None


def result_frame(id_json: bytes, result: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + id_json + b',"result":' + result + b"}"


def error_frame(id_json: bytes, error: A2AError, *, v1: bool) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":' + id_json + b',"error":'
        + _encode(error.to_jsonrpc(v1=v1)) + b"}"
    )
