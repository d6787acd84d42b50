"""A real webhook receiver for the push tests: a small ASGI app served by hypercorn on loopback."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from scoped_a2a import serve


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered (0: never answered)

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Records every POST. Answers the statuses in ``answers`` first, then 200; with
    ``hang=True`` it never answers (it waits until the sender hangs up)."""

    def __init__(self, answers: Iterable[int] = (), *, hang: bool = False,
                 headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self.answers = deque(answers)
        self.hang = hang
        self.extra_headers = list(headers)
        self.requests: list[Received] = []

    def accepted(self) -> list[Received]:
        """The requests answered with a 2xx."""
        return [r for r in self.requests if 200 <= r.status < 300]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # hypercorn's trio worker needs the protocol
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        record = Received(scope["path"], headers, body, 0)
        self.requests.append(record)
        if self.hang:
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        record.status = self.answers.popleft() if self.answers else 200
        await send({"type": "http.response.start", "status": record.status,
                    "headers": [(b"content-type", b"text/plain"), *self.extra_headers]})
        await send({"type": "http.response.body", "body": b"ok" if record.status < 300
                    else b"not now"})


@asynccontextmanager
async def receiving(receiver: Receiver) -> AsyncIterator[str]:
    """Serve ``receiver`` on a free loopback port; yield its webhook URL."""
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            receiver, host="127.0.0.1", port=0, shutdown=shutdown, grace=0.5,
            task_status=task_status))
        try:
            yield f"http://127.0.0.1:{port}/hook"
        finally:
            shutdown.set()


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``predicate()`` holds (a generous bound: fails the test if it never does)."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)
