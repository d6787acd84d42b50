"""A pytest plugin for a diagnostic run of the conformance kit: one messageId per message sent.

    run_tck.py ... -- -p tck_unique_ids      (scripts/run_tck10.sh with UNIQUE_IDS=1)

The kit reuses a messageId for different messages (``tck_id("complete-task")`` in several
requirements, ``tck_id("input-required")`` in several tests, one stream-ordering message on
every transport), although a messageId is "the unique identifier (e.g. UUID) of the message"
(a2a.proto, ``Message.message_id``). A server that deduplicates sends by messageId, as the
specification allows ("Agents may utilize the messageId to detect duplicate messages"),
answers those with the first send's task or refuses them. This plugin appends a counter to each
messageId the kit's JSON-RPC, HTTP+JSON and gRPC clients send (the scenario prefix stays, so
the scenario agent still routes on it), which shows what the kit reports once its messages are
unique. It changes nothing else; the raw-HTTP tests that build their own payloads are
unaffected.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

_counter = itertools.count(1)
_SUFFIX = re.compile(r"-u\d+$")


def _unique(build: Any) -> Any:
    def build_params(**kwargs: Any) -> dict[str, Any]:
        message = kwargs.get("message")
        if isinstance(message, dict) and isinstance(message.get("messageId"), str):
            base = _SUFFIX.sub("", message["messageId"])
            message["messageId"] = f"{base}-u{next(_counter)}"
        return build(**kwargs)  # type: ignore[no-any-return]
    return build_params


def pytest_configure(config: Any) -> None:
    from tck.transport import grpc_client, http_json_client, jsonrpc_client

    for module in (jsonrpc_client, http_json_client, grpc_client):
        module._build_params = _unique(module._build_params)
