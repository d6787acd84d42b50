"""protocol/enum_hint.py: the values a wrong enum field takes, and a cache callers cannot grow.

(No I/O; the answers over real HTTP are tested in test_bad_input.py and test_rest.py.)"""

from __future__ import annotations

import msgspec
import pytest

from scoped_a2a.protocol import enum_hint
from scoped_a2a.protocol.errors import InvalidParams
from scoped_a2a.protocol.jsonrpc import decode_params
from scoped_a2a.protocol.types import SendMessageRequest


def _message_with_role_at(index: int) -> bytes:
    parts = [{"text": "x"}] * 3
    return msgspec.json.encode({"message": {"messageId": f"m{index}", "role": f"r{index}",
                                            "parts": parts}})


def test_the_hint_lists_the_roles_and_leaves_other_errors_alone() -> None:
    with pytest.raises(InvalidParams) as caught:
        decode_params(msgspec.Raw(_message_with_role_at(0)), SendMessageRequest)
    assert "one of ROLE_USER, ROLE_AGENT" in str(caught.value), caught.value
    assert "UNSPECIFIED" not in str(caught.value), caught.value
    not_enum = "Expected `str`, got `int` - at `$.message.messageId`"
    assert enum_hint.with_enum_values(not_enum, SendMessageRequest) == not_enum


def test_paths_differing_only_in_list_indices_share_one_cache_entry() -> None:
    enum_hint._values_at.cache_clear()
    for i in range(500):
        message = f"Invalid enum value 'x' - at `$.message.parts[{i}].nosuch`"
        assert enum_hint.with_enum_values(message, SendMessageRequest) == message
    assert enum_hint._values_at.cache_info().currsize == 1
    assert enum_hint._values_at.cache_info().maxsize is not None  # bounded besides
