"""Decoded ProtoJSON into a protobuf message, directly (no I/O).

``json_format.ParseDict`` checks and converts field by field in Python with many indirections;
this walks the message's descriptor once per field with a cached name table. It covers what
A2A's messages use: scalars, enums by name, bytes as base64, nested and repeated messages, maps,
``Struct`` and ``Timestamp``; other well-known types go to ``json_format``. Keys the message
does not know are ignored, as ``ignore_unknown_fields`` does; ``null`` leaves a field unset.

It raises (TypeError, ValueError, KeyError...) on a value that does not fit; the caller then
parses again with ``json_format`` for its error (:func:`.messages.from_json`).
"""

from __future__ import annotations

import base64
import datetime
import functools
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_INT64 = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                    FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
                    FieldDescriptor.TYPE_SFIXED64})


# How a field is set, decided once per field (codes of :func:`_plan`).
_SCALAR, _ENUM, _BYTES, _INT64_STR, _MESSAGE, _MESSAGES, _SCALARS, _MAP, _STRUCT, _TIME = range(10)


@functools.cache
def _plan(descriptor: Descriptor) -> dict[str, tuple[str, int, FieldDescriptor]]:
    """A message's fields by JSON name and by proto name: (attribute, how to set, field)."""
    table: dict[str, tuple[str, int, FieldDescriptor]] = {}
    for field in descriptor.fields:
        kind = field.message_type
        repeated = _repeated(field)
        if kind is not None and kind.GetOptions().map_entry:
            how = _MAP
        elif kind is not None and repeated:
            how = _MESSAGES
        elif kind is not None and kind.full_name == "google.protobuf.Struct":
            how = _STRUCT
        elif kind is not None and kind.full_name == "google.protobuf.Timestamp":
            how = _TIME
        elif kind is not None:
            how = _MESSAGE
        elif repeated:
            how = _SCALARS
        elif field.enum_type is not None:
            how = _ENUM
        elif field.type == FieldDescriptor.TYPE_BYTES:
            how = _BYTES
        elif field.type in _INT64:
            how = _INT64_STR
        else:
            how = _SCALAR
        table[field.name] = table[field.json_name] = (field.name, how, field)
    return table


def _repeated(field: FieldDescriptor) -> bool:
    # ``is_repeated`` on newer protobuf; ``label`` (deprecated there) on older ones.
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return bool(getattr(field, "label", None) == FieldDescriptor.LABEL_REPEATED)


def fill(message: Message, value: dict[str, Any]) -> None:
    """Set ``message``'s fields from the decoded JSON object ``value``."""
    plan = _plan(message.DESCRIPTOR)
    for key, item in value.items():
        step = plan.get(key)
        if step is None or item is None:
            continue
        name, how, field = step
        if how == _SCALAR:
            setattr(message, name, item)
        elif how == _MESSAGES:
            target = getattr(message, name)
            for element in item:
                _message(target.add(), element)
        elif how == _MESSAGE:
            target = getattr(message, name)
            target.SetInParent()
            _message(target, item)
        elif how == _ENUM:
            setattr(message, name, _scalar(field, item))
        elif how == _STRUCT:
            target = getattr(message, name)
            target.SetInParent()  # ``{}`` is a present, empty Struct
            target.update(item)
        elif how == _TIME:
            _timestamp(getattr(message, name), item)
        elif how == _SCALARS:
            getattr(message, name).extend(_scalar(field, v) for v in item)
        elif how == _MAP:
            target = getattr(message, name)
            value_field = field.message_type.fields_by_name["value"]  # type: ignore[union-attr]
            for k, v in item.items():
                if value_field.message_type is not None:
                    _message(target[k], v)
                else:
                    target[k] = _scalar(value_field, v)
        else:  # bytes, 64-bit integers written as strings
            setattr(message, name, _scalar(field, item))


def _timestamp(message: Any, value: str) -> None:
    # RFC 3339; ``fromisoformat`` reads ``Z`` and fractions from Python 3.11 on.
    when = datetime.datetime.fromisoformat(value)
    if when.tzinfo is None:
        raise ValueError("a timestamp needs a time zone")
    message.FromDatetime(when)


def _message(message: Message, value: Any) -> None:
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Struct":
        message.update(value)  # type: ignore[attr-defined]
    elif name == "google.protobuf.Timestamp":
        _timestamp(message, value)
    elif name.startswith("google.protobuf."):
        json_format.ParseDict(value, message)
    elif isinstance(value, dict):
        fill(message, value)
    else:
        raise TypeError(f"{name} must be a JSON object")


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.enum_type is not None:
        if isinstance(value, str):
            return field.enum_type.values_by_name[value].number
        return int(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64decode(value)
    if field.type in _INT64 and isinstance(value, str):
        return int(value)
    return value
