"""``A2AApp`` mounted under a prefix in a Starlette or FastAPI app, driven by the a2a-sdk client.

The host app is served through hypercorn (``scoped_a2a.serve`` serves any ASGI app) and its
lifespan enters ``a2a.running()``, since a host does not run a mounted app's lifespan.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from scoped_a2a import A2AApp, serve
from scoped_a2a.agents.demo import demo_agent

pytestmark = pytest.mark.anyio


def starlette_host(a2a: A2AApp) -> Any:
    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with a2a.running():
            yield

    async def health(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/health", health), Mount("/agents/echo", app=a2a)],
                     lifespan=lifespan)


def fastapi_host(a2a: A2AApp) -> Any:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with a2a.running():
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/health")
    async def health() -> str:
        return "ok"

    app.mount("/agents/echo", a2a)
    return app


class StripPrefix:
    """A proxy-style ASGI wrapper that passes the path *relative* to ``root_path``."""

    def __init__(self, app: A2AApp, prefix: str) -> None:
        self.app, self.prefix = app, prefix

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if not path.startswith(self.prefix):
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            scope = {**scope, "root_path": self.prefix, "path": path[len(self.prefix):] or "/"}
        await self.app(scope, receive, send)


def relative_host(a2a: A2AApp) -> Any:
    return StripPrefix(a2a, "/agents/echo")


@asynccontextmanager
async def served_host(app: Any) -> AsyncIterator[str]:
    """Serve the host app through hypercorn; yield the mounted agent's URL."""
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, grace=2.0,
            task_status=task_status))
        try:
            yield f"http://127.0.0.1:{port}/agents/echo/"
        finally:
            shutdown.set()


def request(text: str) -> SendMessageRequest:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=msg)


@pytest.mark.parametrize("host", [starlette_host, fastapi_host, relative_host],
                         ids=["starlette", "fastapi", "relative-path"])
@pytest.mark.parametrize("proto", ["1.0", "0.3"])
async def test_mounted_app_serves_card_send_and_get(
        host: Callable[[A2AApp], Any], proto: str, anyio_backend: str) -> None:
    a2a = A2AApp(demo_agent, grace=1.0)
    async with served_host(host(a2a)) as url, httpx.AsyncClient(timeout=10) as h:
        card = await A2ACardResolver(h, url).get_agent_card()
        assert {i.url for i in card.supported_interfaces} == {url, url.rstrip("/")}  # REST: no "/"
        keep = [i for i in card.supported_interfaces if i.protocol_version == proto]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(keep)
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=h)).create(card)
        async with client:
            [response] = [r async for r in client.send_message(request("hello mount"))]
            task = response.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.status.message.parts[0].text == "You said: hello mount"
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED
        # The rest of the host app still answers, and a wrong path names the mounted URL.
        if host is not relative_host:
            assert (await h.get(url.replace("/agents/echo/", "/health"))).status_code == 200
        wrong = await h.get(url + "nope")
        assert wrong.status_code == 404
        error = wrong.json()["error"]  # google.rpc.Status, as for every unknown route
        assert error["status"] == "NOT_FOUND"
        assert "POSTed to /agents/echo/" in error["message"], error
