"""Counting the fields of a serialized protobuf message before decoding it (no I/O).

Decoding a request message costs time in proportion to its fields, not its bytes: 8 MB of
400,000 tiny ``Struct`` entries took upb's ``FromString`` about 0.75 s (in C, with the GIL held,
so a worker thread does not help) and ``MessageToDict`` about 0.8 s more, and the event loop
served no one else meanwhile. :func:`count_fields` walks the wire format with the message's
descriptors and stops as soon as the count passes a cap, so a message of too many fields costs
at most ``cap`` Python steps before it is refused, whatever its size.

What counts: every field on the wire, at every depth, each element of a repeated field and each
map entry with its key and value (a ``Struct`` entry ``"k": 1`` is 4: the entry, its key, its
``Value`` and the ``Value``'s number). Strings and bytes are skipped by their length (one step);
message-typed fields (map entries, ``Struct``, ``Value``, ``ListValue`` included) are walked
into, as are groups. Unknown fields count too: they cost the decoder as much.

The walk is a loop with an explicit stack, never Python recursion; nesting deeper than
``max_depth`` (protobuf's own decoder stops at 100) is refused before anything is decoded.
Bytes that are not a protobuf message (a truncated field, a length past the end, a bad wire
type or field number, an unmatched group end) raise :class:`Malformed`; the decoder refuses
those bytes too. Nothing here allocates in proportion to the message but the stack.
"""

from __future__ import annotations

import functools

from google.protobuf.descriptor import Descriptor, FieldDescriptor

MAX_DEPTH = 100
"""Nesting the walk accepts: protobuf's default recursion limit."""

_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5


class TooManyFields(Exception):
    """The message holds more fields than the cap (``limit``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class TooDeep(Exception):
    """The message nests messages (or groups) deeper than ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class Malformed(Exception):
    """The bytes are not a serialized protobuf message."""


@functools.cache
def _children(descriptor: Descriptor) -> dict[int, Descriptor]:
    """The message-typed fields of ``descriptor`` by number: their message descriptors."""
    return {field.number: field.message_type for field in descriptor.fields
            if field.message_type is not None and field.type == FieldDescriptor.TYPE_MESSAGE}


def count_fields(data: bytes, descriptor: Descriptor, max_fields: int,
                 max_depth: int = MAX_DEPTH) -> int:
    """The number of fields in the serialized ``descriptor`` message ``data``.

    Raises :class:`TooManyFields` as soon as the count passes ``max_fields`` (having walked
    ``max_fields + 1`` fields, not the rest), :class:`TooDeep` for nesting deeper than
    ``max_depth`` and :class:`Malformed` for bytes that are not such a message.
    """
    # One frame per message being walked: (its end offset, its child table, the field number
    # of the group it is, or 0 for a length-delimited one). The top frame's fields are in
    # ``children``/``end``/``group`` (locals: the loop is the hot path).
    stack: list[tuple[int, dict[int, Descriptor], int]] = []
    children = _children(descriptor)
    end = len(data)
    group = 0
    count = 0
    at = 0
    while True:
        if at >= end:
            if at > end or group:
                raise Malformed("a field runs past the end of its message")
            if not stack:
                return count
            end, children, group = stack.pop()
            continue
        # The tag: a varint, nearly always one byte.
        tag = data[at]
        at += 1
        if tag & 0x80:
            tag, at = _varint(data, at, tag)
        count += 1
        if count > max_fields:
            raise TooManyFields(max_fields)
        number, wire = tag >> 3, tag & 7
        if (number == 0 and not group) or number > 0x1FFFFFFF:
            # (upb lets a field 0 pass inside a group it skips; so does this walk)
            raise Malformed("a field number is out of range")
        if wire == _VARINT:
            while True:
                if at >= end:
                    raise Malformed("a varint runs past the end of its message")
                at += 1
                if not data[at - 1] & 0x80:
                    break
        elif wire == _LEN:
            if at >= end:
                raise Malformed("a length runs past the end of its message")
            length = data[at]
            at += 1
            if length & 0x80:
                length, at = _varint(data, at, length)
            start, at = at, at + length
            if at > end:
                raise Malformed("a field runs past the end of its message")
            child = children.get(number)
            if child is not None:
                if len(stack) + 1 >= max_depth:
                    raise TooDeep(max_depth)
                stack.append((end, children, group))
                children, end, group, at = _children(child), at, 0, start
        elif wire == _I64:
            at += 8
        elif wire == _I32:
            at += 4
        elif wire == _SGROUP:
            if len(stack) + 1 >= max_depth:
                raise TooDeep(max_depth)
            stack.append((end, children, group))
            children, group = {}, number  # a group's fields are walked, as unknown ones
        elif wire == _EGROUP:
            if group != number:
                raise Malformed("a group ends that did not start")
            count -= 1  # the end marker is not a field of its own
            end, children, group = stack.pop()
        else:
            raise Malformed("a field has an unknown wire type")


def _varint(data: bytes, at: int, first: int) -> tuple[int, int]:
    """The rest of a varint whose first byte (``first``, continuation bit set) was at
    ``at - 1``: its value and the offset after it. At most 10 bytes."""
    value = first & 0x7F
    shift = 7
    while True:
        if at >= len(data) or shift > 63:
            raise Malformed("a varint is truncated or too long")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
