"""HTTP+JSON media types, real HTTP, both backends.

Spec 1.0.1 §11.1: "Content-Type: application/a2a+json SHOULD be used for requests and
responses" (1.0.0 said application/json). A request that uses ``application/a2a+json`` is
answered with it, successes and errors alike; a plain ``application/json`` caller (or one that
says nothing) is answered ``application/json`` as before, so clients written from 1.0.0 (the
kit's HTTP_JSON-SVC-001) keep passing. Streams stay ``text/event-stream``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent

from .helpers import served

pytestmark = pytest.mark.anyio

A2A = "application/a2a+json"
JSON = "application/json"


def _body(text: str) -> bytes:
    return json.dumps({"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                                   "parts": [{"text": text}]}}).encode()


async def test_answered_with_the_media_type_the_request_used() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient(
            base_url=url, headers={"A2A-Version": "1.0"}, timeout=15) as http:
        for sent in (A2A, f"{A2A}; charset=utf-8", JSON, f"{JSON}; charset=utf-8"):
            want = A2A if sent.startswith(A2A) else JSON
            ok = await http.post("/message:send", content=_body("hi"),
                                 headers={"content-type": sent})
            assert ok.status_code == 200 and ok.headers["content-type"] == want, (sent, ok)
            task = ok.json()["task"]
            # An error the method layer decides (invalid params) and one the binding does.
            bad = await http.post("/message:send", content=b'{"message": 5}',
                                  headers={"content-type": sent})
            assert bad.status_code == 400 and bad.headers["content-type"] == want, sent
            assert bad.json()["error"]["status"] == "INVALID_ARGUMENT"
            cancel = await http.post(f"/tasks/{task['id']}:cancel", content=b"{}",
                                     headers={"content-type": sent})
            assert cancel.status_code == 400 and cancel.headers["content-type"] == want
            nothing = await http.post("/tasks/x:nothing", content=b"{}",
                                      headers={"content-type": sent})
            assert nothing.status_code == 404 and nothing.headers["content-type"] == want
            off_route = await http.post("/elsewhere", content=b"{}",
                                        headers={"content-type": sent})
            assert off_route.status_code == 404
            assert off_route.headers["content-type"] == want
            async with http.stream("POST", "/message:stream", content=_body("hi"),
                                   headers={"content-type": sent}) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                await stream.aread()
        # Without a body: the Accept header decides; absent or naming JSON, it is JSON.
        for accept, want in ((A2A, A2A), (f"{A2A};q=0.9, */*;q=0.1", A2A), (JSON, JSON),
                             (f"{JSON}, {A2A}", JSON), (None, JSON)):
            headers: dict[str, Any] = {"accept": accept} if accept else {}
            got = await http.get(f"/tasks/{task['id']}", headers=headers)
            assert got.status_code == 200 and got.headers["content-type"] == want, accept
            missing = await http.get("/tasks/no-such-task", headers=headers)
            assert missing.status_code == 404 and missing.headers["content-type"] == want
        # Any other body type is refused (415) and answered as plain JSON.
        refused = await http.post("/message:send", content=_body("hi"),
                                  headers={"content-type": "text/plain"})
        assert refused.status_code == 415 and refused.headers["content-type"] == JSON
