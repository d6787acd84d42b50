"""The values a request's enum field takes, for the error that names a wrong one (no I/O).

msgspec says ``Invalid enum value 'completed' - at `$.status``` and stops there: a caller who
wrote a 0.3 state name (``completed``) or a lower-case role learns what is wrong but not what
is right. :func:`with_enum_values` finds the field the error's path names, by walking the
request type's fields (JSON or proto names, list items, optional members), and adds the enum's
values to the message (the proto enums' ``..._UNSPECIFIED`` zero value left out). A path it
cannot follow leaves the message as it was.
"""

from __future__ import annotations

import re
from functools import lru_cache

import msgspec.inspect as mi

_WRONG_ENUM = re.compile(r"^Invalid enum value .* - at `\$((?:\.[A-Za-z_][A-Za-z0-9_]*"
                         r"|\[\d+\])*)`$")
_INDEX = re.compile(r"\[\d+\]")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_MOST = 12
"""Values listed at most (an enum longer than that is named by its first ones)."""


def with_enum_values(message: str, request_type: type) -> str:
    """``message`` (msgspec's), with ``: one of A, B, ...`` added when it is about an enum
    field of ``request_type`` that the path leads to."""
    m = _WRONG_ENUM.match(message)
    if m is None:
        return message
    # List indices come from the caller's body: one key for every index, so a caller cannot
    # grow the cache with distinct paths (and the field's type does not depend on the index).
    values = _values_at(request_type, _INDEX.sub("[0]", m.group(1)))
    if not values:
        return message
    shown = ", ".join(values[:_MOST]) + (", ..." if len(values) > _MOST else "")
    return f"{message}: one of {shown}"


@lru_cache(maxsize=256)  # bounded: field names come from the caller's body too
def _values_at(request_type: type, path: str) -> tuple[str, ...]:
    node: mi.Type | None = mi.type_info(request_type)
    for name, _index in _STEP.findall(path):
        node = _step(node, name) if name else _item(node)
        if node is None:
            return ()
    node = _unwrapped(node)
    if isinstance(node, mi.EnumType):
        # The proto enums' zero value (``..._UNSPECIFIED``) is never a valid choice.
        return tuple(str(member.value) for member in node.cls
                     if not str(member.value).endswith("_UNSPECIFIED"))
    if isinstance(node, mi.LiteralType):
        return tuple(str(v) for v in node.values)
    return ()


def _unwrapped(node: mi.Type | None) -> mi.Type | None:
    """The one member of an optional (``X | None``) that is not None."""
    if isinstance(node, mi.UnionType):
        members = [t for t in node.types if not isinstance(t, mi.NoneType)]
        if len(members) == 1:
            return members[0]
    return node


def _step(node: mi.Type | None, name: str) -> mi.Type | None:
    node = _unwrapped(node)
    if isinstance(node, mi.StructType):
        for field in node.fields:
            if name in (field.encode_name, field.name):
                return field.type
    if isinstance(node, mi.DictType):
        return node.value_type
    return None


def _item(node: mi.Type | None) -> mi.Type | None:
    node = _unwrapped(node)
    if isinstance(node, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return node.item_type
    return None
