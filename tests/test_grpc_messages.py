"""The protobuf side of the gRPC binding, without a server: the messages load beside a2a-sdk's
own generated module (same proto file, other pool), the direct ProtoJSON fill gives exactly
``json_format``'s message, and values that do not fit are refused as ``json_format`` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from scoped_a2a.protocol.grpc import messages
from scoped_a2a.server.auth import Authenticator, card_security
from scoped_a2a.server.auth.api_keys import ApiKeys
from scoped_a2a.server.card import build_card

TASK = {
    "id": "t1", "contextId": "c1", "kind": "task",
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-02T07:00:00.123Z",
               "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}],
                           "metadata": {"reason": "x", "n": 3}}},
    "artifacts": [{"artifactId": "a", "name": "reply", "parts": [
        {"text": "hi"}, {"raw": "aGk=", "mediaType": "x/y", "filename": "f"},
        {"data": {"a": [1, 2, {"b": None}]}}, {"url": "https://x.test/f"}]}],
    "history": [{"messageId": "m0", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                 "referenceTaskIds": ["t0"], "extensions": ["urn:x"]}],
    "metadata": {},
}


def same(doc: object, name: str) -> None:
    cls = messages.message_class(name)
    text = json.dumps(doc).encode()
    fast = messages.from_json(text, cls)
    slow = json_format.Parse(text, cls(), ignore_unknown_fields=True)
    assert fast == slow
    assert fast.SerializeToString(deterministic=True) == \
        slow.SerializeToString(deterministic=True)


def test_loads_beside_a2a_sdk_generated_module() -> None:
    from a2a.types import a2a_pb2

    assert a2a_pb2.Task.DESCRIPTOR.full_name == "lf.a2a.v1.Task"
    assert len(messages.methods()) == 11
    assert {m.name for m in messages.methods().values() if m.streaming} == {
        "SendStreamingMessage", "SubscribeToTask"}


def test_the_direct_fill_is_json_format(tmp_path: Path) -> None:
    same({"task": TASK}, "lf.a2a.v1.SendMessageResponse")
    same({"statusUpdate": {"taskId": "t", "contextId": "c", "status": TASK["status"]}},
         "lf.a2a.v1.StreamResponse")
    same({"tasks": [TASK], "nextPageToken": "", "pageSize": 1, "totalSize": 1},
         "lf.a2a.v1.ListTasksResponse")
    same({"taskId": "t", "id": "p", "url": "https://h.test/", "authentication": {
        "scheme": "Bearer", "credentials": "c"}}, "lf.a2a.v1.TaskPushNotificationConfig")
    keys = tmp_path / "keys"
    keys.write_text("a:b\n")
    card = build_card("http://127.0.0.1:1/", card_security(Authenticator([ApiKeys(keys)])),
                      extended=True, grpc=True)
    same(card, "lf.a2a.v1.AgentCard")  # the 0.3 fields are ignored, as unknown fields


@pytest.mark.parametrize("doc", [
    {"task": {"history": [5]}},
    {"task": {"id": 5}},
    {"task": {"status": {"timestamp": "yesterday"}}},
    {"task": {"artifacts": {"not": "a list"}}},
])
def test_values_that_do_not_fit_are_refused_as_json_format_does(doc: object) -> None:
    with pytest.raises(json_format.ParseError):
        messages.from_json(json.dumps(doc).encode(),
                           messages.message_class("lf.a2a.v1.SendMessageResponse"))


def test_the_generated_descriptor_module_is_current() -> None:
    """``scripts/gen_grpc.py --check``: the committed module is what the vendored proto gives."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "scripts" / "gen_grpc.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
