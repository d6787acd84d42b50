"""``serving on ...`` (server/serve.py) is said once the server answers: after the app's lifespan
has started, not as soon as the socket listens.

Scripts, supervisors and tests act on the line at once; until the lifespan has started (the
store open, the nursery running) hypercorn accepts nothing, so a request made on the word of an
early line waits in the kernel's queue (or is reset if start-up then fails). Here the app's
lifespan start-up is held at a gate: the socket already takes TCP connections, the line is not
said yet; once the gate opens, the line is said and the request already sent is answered.
Over real HTTP through hypercorn, on both backends.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import anyio
import pytest

from scoped_a2a import A2AApp, RunContext, serve

from .helpers import free_port

pytestmark = pytest.mark.anyio


async def echo(ctx: RunContext) -> str:
    return ctx.text


class GatedApp(A2AApp):
    """An A2AApp whose lifespan start-up waits for ``gate``."""

    gate: anyio.Event

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.gate.wait()
        await super().__call__(scope, receive, send)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_serving_on_is_said_once_the_server_answers() -> None:
    lines = Lines()
    logger = logging.getLogger("scoped_a2a.serve")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    app = GatedApp(echo, public_url="http://127.0.0.1/")
    app.gate = anyio.Event()
    port = free_port()
    shutdown = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(serve, app, host="127.0.0.1", port=port, shutdown=shutdown))
            with anyio.fail_after(10):
                while True:  # the socket listens (a TCP connect succeeds) ...
                    try:
                        conn = await anyio.connect_tcp("127.0.0.1", port)
                        break
                    except OSError:
                        await anyio.sleep(0.01)
            async with conn:
                await conn.send(b"GET /.well-known/agent-card.json HTTP/1.1\r\n"
                                b"Host: x\r\nConnection: close\r\n\r\n")
                # ... but start-up has not finished: nothing is said, nothing answered yet.
                with anyio.move_on_after(0.2):
                    early = await conn.receive()
                    pytest.fail(f"answered before start-up finished: {early[:80]!r}")
                said = [line for line in lines.lines if line.startswith("serving on")]
                assert said == [], f"said before the server could answer: {lines.lines}"
                app.gate.set()
                with anyio.fail_after(10):
                    answer = await conn.receive()
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            said = [line for line in lines.lines if line.startswith("serving on")]
            assert said == [f"serving on http://127.0.0.1:{port}/ ({app_backend()})"], lines.lines
            shutdown.set()
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def app_backend() -> str:
    import sniffio

    return sniffio.current_async_library()
