"""Test helpers: serve an app through real hypercorn, JSON-RPC calls, SSE parsing."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx

from scoped_a2a import A2AApp, serve
from scoped_a2a.testing.proxy import FaultyProxy


@asynccontextmanager
async def served(
    app: A2AApp, *, grace: float | None = None, http2: bool = False
) -> AsyncIterator[str]:
    """Serve ``app`` through hypercorn on a free loopback port; yield its base URL.

    ``http2``: HTTP/2 (h2c prior knowledge) is served too, as ``serve --http2``.

    On exit the server shuts down gracefully (as SIGTERM would) and this waits for it.
    """
    shutdown = anyio.Event()
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, grace=grace, http2=http2,
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


class CutSends(FaultyProxy):
    """Forwards everything, but cuts the answer of the first ``n`` sends halfway (the agent
    has accepted each of them, and its answer never reaches the client whole); or, with
    ``action="close"``, drops those sends' connections before forwarding them."""

    def __init__(self, upstream_port: int, n: int = 1, action: str = "cut") -> None:
        super().__init__(upstream_port, "close", methods=())
        self.left = n
        self.action = action

    async def _action(self, method: str | None, task_id: str | None) -> str:
        if method in ("SendMessage", "SendStreamingMessage") and self.left > 0:
            self.left -= 1
            return self.action
        return "forward"


@asynccontextmanager
async def cutting_sends(url: str, n: int = 1, action: str = "cut") -> AsyncIterator[str]:
    """A :class:`CutSends` proxy in front of the server at ``url``: yield the proxy's URL."""
    proxy = CutSends(int(url.rstrip("/").rsplit(":", 1)[1]), n, action)
    async with anyio.create_task_group() as tg:
        proxy_port = await tg.start(proxy.serve)
        try:
            yield f"http://127.0.0.1:{proxy_port}/"
        finally:
            proxy.vanish()


_PORTS_FROM, _PORTS_PER_WORKER = 10_000, 2_000
"""free_port's ports: below Linux's ephemeral range (32768 up by default), a slice each."""


def free_port() -> int:
    """A loopback port nothing listens on now (bound, then released), for a process the test
    starts. Not the kernel's pick (``bind(0)``): between its release and the process's bind,
    the kernel could hand the same port to another test worker's ``bind(0)`` or to an
    outgoing connection, and the peer then failed with "address already in use" (seen with
    three workers). So each pytest-xdist worker draws from a slice of its own, below the
    ephemeral range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = _PORTS_FROM + (int(worker) if worker.isdigit() else 0) * _PORTS_PER_WORKER % 20_000
    for _ in range(100):
        port = random.randrange(first, first + _PORTS_PER_WORKER)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {first}-{first + _PORTS_PER_WORKER}")


def listen_backlogs(port: int) -> list[int] | None:
    """The accept-queue limit of each socket listening on TCP ``port`` (``ss``'s Send-Q for a
    listening socket: the backlog ``listen()`` was last given, capped by somaxconn); None
    where ``ss`` is not installed."""
    ss = shutil.which("ss")
    if ss is None:
        return None
    out = subprocess.run([ss, "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                         check=True, timeout=10).stdout
    return [int(line.split()[2]) for line in out.splitlines() if line.startswith("LISTEN")]


def somaxconn() -> int:
    """The kernel's cap on a listen backlog (net.core.somaxconn)."""
    with open("/proc/sys/net/core/somaxconn") as f:
        return int(f.read())
