"""ProtoJSON input names: accept a field's original proto name beside its JSON name (no I/O).

A2A 1.0 is defined by its proto, and ProtoJSON parsers accept both the lowerCamelCase JSON name
(``taskId``) and the proto field name (``task_id``) on input; writers always use the JSON name.
Our wire structs decode camelCase only (msgspec's ``rename="camel"``), so a request written with
proto names is rewritten to JSON names first, guided by the target type:

- only keys that name a *field* of a struct are renamed; the keys of free-form maps
  (``metadata``, a part's ``data``) are the caller's own and are never touched;
- a key is renamed only when its JSON name is not also present (the JSON name wins);
- the rewrite runs only when the raw params hold a key that looks like a proto name, so the
  common camelCase request pays one regular-expression scan and nothing else.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import msgspec
from msgspec import inspect as mi

_encode = msgspec.json.Encoder().encode

# A JSON object key with an underscore between lower-case words, followed by a colon.
_SNAKE_KEY = re.compile(rb'"[a-z][a-z0-9]*_[a-z0-9_]*"\s*:')


def may_hold_proto_names(raw: bytes) -> bool:
    """True when ``raw`` has an object key that may be a proto field name (``"task_id":``)."""
    return _SNAKE_KEY.search(raw) is not None


@functools.cache
def _info(type_: Any) -> mi.Type:
    return mi.type_info(type_)


def to_json_names(value: Any, type_: Any) -> Any:
    """Rewrite proto field names in decoded JSON ``value`` to the JSON names ``type_`` expects.

    Returns the value to decode (the same object, changed in place where keys were renamed).
    Values that do not fit the type are left as they are: the typed decode that follows reports
    them with the field's JSON name.
    """
    return _walk(value, _info(type_))


def _walk(value: Any, info: mi.Type) -> Any:
    if isinstance(info, mi.StructType):
        if isinstance(value, dict):
            _rename_fields(value, info)
    elif isinstance(info, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        if isinstance(value, list):
            for item in value:
                _walk(item, info.item_type)
    elif isinstance(info, mi.DictType):
        if isinstance(value, dict):
            for item in value.values():
                _walk(item, info.value_type)
    elif isinstance(info, mi.UnionType):
        for member in info.types:
            if isinstance(member, mi.StructType) and isinstance(value, dict):
                _walk(value, member)
                break
            if isinstance(member, (mi.ListType, mi.DictType)) and isinstance(
                value, list if isinstance(member, mi.ListType) else dict
            ):
                _walk(value, member)
                break
    return value


def _rename_fields(obj: dict[str, Any], info: mi.StructType) -> None:
    for field in info.fields:
        if field.name != field.encode_name and field.name in obj and field.encode_name not in obj:
            obj[field.encode_name] = obj.pop(field.name)
        if field.encode_name in obj:
            _walk(obj[field.encode_name], field.type)


def decode_with_proto_names(raw: bytes, type_: type[Any]) -> Any:
    """Decode ``raw`` into ``type_``, accepting proto field names as well as JSON names.

    Raises msgspec's DecodeError or ValidationError as a plain typed decode would.
    """
    if may_hold_proto_names(raw):
        # Re-encoded, not ``msgspec.convert``: the typed JSON decode is the one the fast path
        # uses, so both paths accept and refuse exactly the same values (base64 bytes, enums).
        value = to_json_names(msgspec.json.decode(raw), type_)
        return _decoder(type_).decode(_encode(value))
    return _decoder(type_).decode(raw)


_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    """One decoder per type: cheaper per call than ``msgspec.json.decode(raw, type=...)``."""
    decoder = _DECODERS.get(type_)
    if decoder is None:
        decoder = _DECODERS[type_] = msgspec.json.Decoder(type_)
    return decoder
