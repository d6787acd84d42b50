"""A finished request leaves no cyclic garbage behind.

Garbage in reference cycles is freed only by the cyclic collector, whose passes cost every
request CPU (a blocking send took ~30% less CPU with the collector off while each request left
~40 objects in cycles: anyio, on asyncio, keeps a cancelled child task's exception in a cycle with
its traceback, and the request's disconnect watcher used to be ended by cancelling it). These
tests drive the ASGI app directly (no server stack, whose own objects are not ours to judge) with
the collector off, and count what a collection then finds: nothing, per request kind, on both
backends.
"""

from __future__ import annotations

import gc
import itertools
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from scoped_a2a import A2AApp, RunContext

pytestmark = pytest.mark.anyio

REQUESTS = 30


async def echo(ctx: RunContext) -> str:
    await ctx.working("on it")
    return "done"


def _rpc(method: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}).encode()


CASES = {
    "blocking send": ("/", _rpc("SendMessage")),
    "stream": ("/", _rpc("SendStreamingMessage")),
    "REST send": ("/message:send", json.dumps({"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}).encode()),
    "unknown method": ("/", b'{"jsonrpc":"2.0","id":1,"method":"Nope","params":{}}'),
}


async def _request(app: A2AApp, path: str, body: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    never = anyio.Event()
    bodies = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if bodies:
            return bodies.pop()
        await never.wait()  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "root_path": "",
             "query_string": b"", "headers": [(b"content-type", b"application/json"),
                                                (b"a2a-version", b"1.0"), (b"host", b"t")]}
    await app(scope, receive, send)
    return sent


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("case", list(CASES))
async def test_a_request_leaves_no_cyclic_garbage(case: str, collector_off: None) -> None:
    path, body = CASES[case]
    app = A2AApp(echo)
    # A message id of its own per request: a repeated one is a resend (docs/exactly-once.md).
    ids = (b'"m%d"' % i for i in itertools.count())
    async with app.running():
        for _ in range(5):  # warm up: first-use caches, lazily made objects
            await _request(app, path, body.replace(b'"m1"', next(ids)))
        gc.collect()
        for _ in range(REQUESTS):
            sent = await _request(app, path, body.replace(b'"m1"', next(ids)))
            bodies = b"".join(m.get("body", b"") for m in sent)
            assert sent[0]["status"] in (200, 404), sent[0]
            if case != "unknown method":
                assert b"TASK_STATE_COMPLETED" in bodies, bodies
        found = gc.collect()
    # A few objects of the backend's own may turn up once; a cycle per request would be >= 30.
    assert found < REQUESTS, f"{found} objects in cycles after {REQUESTS} requests ({case})"
