"""Test helpers: serve an app through real hypercorn, JSON-RPC calls, SSE parsing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx

from scoped_a2a import A2AApp, serve


@asynccontextmanager
async def served(app: A2AApp, *, grace: float | None = None) -> AsyncIterator[str]:
    """Serve ``app`` through hypercorn on a free loopback port; yield its base URL.

    On exit the server shuts down gracefully (as SIGTERM would) and this waits for it.
    """
    shutdown = anyio.Event()
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, grace=grace,
            task_status=task_status))
        try:
            yield f"http://127.0.0.1:{port}/"
        except Exception as exc:
            # A failing test still shuts the server down gracefully (not by cancelling it),
            # so its report is not buried under the server's teardown noise.
            failure = exc
        finally:
            shutdown.set()
    if failure is not None:
        raise failure


def text_message(text: str, *, v1: bool = True, **extra: Any) -> dict[str, Any]:
    import uuid

    if v1:
        msg = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    else:
        msg = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user",
               "parts": [{"kind": "text", "text": text}]}
    msg.update(extra)
    return msg


async def rpc(
    client: httpx.AsyncClient, url: str, method: str, params: Any, *, version: str | None = "1.0",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """POST one JSON-RPC call; return the decoded JSON-RPC response object."""
    hdrs = {"A2A-Version": version} if version else {}
    hdrs.update(headers or {})
    r = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                     "params": params}, headers=hdrs)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
    """Parse an SSE response into (id, data) pairs; comments are skipped."""
    import json

    event_id: int | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event_id, json.loads("\n".join(data))
            event_id, data = None, []
        elif line.startswith("id:"):
            event_id = int(line[3:].strip())
        elif line.startswith("data:"):
            data.append(line[5:].strip())
