"""The field count a gRPC request message is checked against before it is decoded
(``protocol/grpc/census.py``): what it counts, that it stops at the cap, that it refuses nesting
exactly where protobuf's own decoder does, and that it never calls bytes malformed that the
decoder accepts. The refusals over a real server: tests/test_grpc_hostile.py."""

from __future__ import annotations

import random

import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf.message import DecodeError

from scoped_a2a.protocol.grpc.census import (
    MAX_DEPTH,
    Malformed,
    TooDeep,
    TooManyFields,
    count_fields,
)
from scoped_a2a.protocol.grpc.messages import methods

from .grpc_client import field, varint

SEND = methods()["SendMessage"].request
DESCRIPTOR = SEND.DESCRIPTOR


def request(metadata: dict[str, object] | None = None) -> bytes:
    req = pb.SendMessageRequest(
        message=pb.Message(message_id="m1", role=pb.ROLE_USER, parts=[pb.Part(text="hi")]))
    if metadata is not None:
        req.metadata.update(metadata)
    return req.SerializeToString()


def test_every_field_counts_at_every_depth() -> None:
    # message (1): message_id, role, parts (1) -> text: 4 fields inside.
    assert count_fields(request(), DESCRIPTOR, 100) == 5
    # A metadata object with one entry: metadata, entry, key, value, number_value.
    assert count_fields(request({"k": 1}), DESCRIPTOR, 100) == 10
    # A list: its value, the list, and each element's value and what it holds; a string is
    # one field, skipped whole.
    assert count_fields(request({"k": [1, "x" * 10_000]}), DESCRIPTOR, 100) == 14


def test_the_count_stops_at_the_cap() -> None:
    """Past the cap the walk stops: bytes that are not a message further on are never read."""
    data = request({str(i): 1 for i in range(1_000)}) + b"\xff"  # a truncated varint at the end
    with pytest.raises(Malformed):
        count_fields(data, DESCRIPTOR, 10**6)
    with pytest.raises(TooManyFields) as over:
        count_fields(data, DESCRIPTOR, 100)
    assert over.value.limit == 100


def nested(levels: int) -> bytes:
    """A SendMessageRequest whose metadata holds lists nested ``levels`` deep."""
    value = b"\x11" + bytes(8)
    for _ in range(levels):
        value = field(6, field(1, value))
    number = DESCRIPTOR.fields_by_name["metadata"].number
    return field(number, field(1, field(1, b"k") + field(2, value)))


def test_nesting_is_refused_exactly_where_protobuf_refuses_it() -> None:
    assert MAX_DEPTH == 100
    assert count_fields(nested(48), DESCRIPTOR, 10**6) == 4 + 2 * 48 + 1
    SEND.FromString(nested(48))  # 100 messages deep: protobuf decodes it
    with pytest.raises(TooDeep):
        count_fields(nested(49), DESCRIPTOR, 10**6)
    with pytest.raises(DecodeError):
        SEND.FromString(nested(49))
    # Far deeper: refused as early, with no recursion in Python.
    with pytest.raises(TooDeep):
        count_fields(nested(50_000), DESCRIPTOR, 10**9)


def test_groups_are_walked_and_must_end() -> None:
    group = varint(15 << 3 | 3) + varint(1 << 3) + b"\x01" + varint(15 << 3 | 4)
    data = request() + group
    assert count_fields(data, DESCRIPTOR, 100) == 5 + 2  # the group and its one field
    SEND.FromString(data)
    for bad in (request() + group[:-1], request() + varint(15 << 3 | 4)):
        with pytest.raises(Malformed):
            count_fields(bad, DESCRIPTOR, 100)
        with pytest.raises(DecodeError):
            SEND.FromString(bad)


def test_whatever_it_calls_malformed_protobuf_refuses_too() -> None:
    """Mutated and random bytes: the walk never refuses what the decoder would take (it may
    let through what the decoder then refuses: bad UTF-8, say)."""
    rng = random.Random(25)
    good = request({"a": 1, "b": [1, "x", {"c": None, "d": True}], "e": {"f": "g"}})
    malformed = 0
    for i in range(20_000):
        if i % 2:
            data = bytearray(good)
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(data))
                if rng.random() < 0.6:
                    data[at] = rng.randrange(256)
                else:
                    del data[at:]
                    break
        else:
            data = bytearray(rng.choice((rng.randrange(256), 0x0B, 0x0C, 0x13, 0x14, 0x0A, 0x80))
                             for _ in range(rng.randint(1, 12)))
        try:
            count_fields(bytes(data), DESCRIPTOR, 10**6)
        except (Malformed, TooDeep):
            malformed += 1
            with pytest.raises(DecodeError):
                SEND.FromString(bytes(data))
    assert malformed > 5_000  # the check is not vacuous
