"""A fake OpenAI-compatible chat-completions endpoint on loopback, for the ADK tests.

A raw TCP server (anyio), so a test sees exactly when a client closes its connection: each
request is answered with a streamed (chunked SSE) completion from ``respond(body)``; with
``hold=True`` the stream stops after its chunks and waits for the client to go, recording when
its connection closed (``closed``), which is how a test proves a cancelled model call was aborted.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import SocketStream

Respond = Callable[[dict[str, Any]], list[dict[str, Any]]]


def text_deltas(*chunks: str) -> list[dict[str, Any]]:
    return [{"content": c} for c in chunks]


def tool_call_deltas(name: str, args: dict[str, Any], call_id: str = "call_1"
                     ) -> list[dict[str, Any]]:
    """A tool call as OpenAI streams it: the name first, then the arguments in two pieces."""
    arguments = json.dumps(args)
    half = len(arguments) // 2
    return [
        {"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                         "function": {"name": name, "arguments": arguments[:half]}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]},
    ]


class FakeChatCompletions:
    def __init__(self, respond: Respond, *, hold: bool = False) -> None:
        self.respond = respond
        self.hold = hold
        self.requests: list[dict[str, Any]] = []
        self.headers: list[str] = []
        self.streaming = anyio.Event()
        """Set once a held response has sent its chunks (a model call is in flight)."""
        self.closed: list[float] = []
        """``time.monotonic()`` of each held connection's close by the client."""
        self.closed_event = anyio.Event()
        self.url = ""

    async def _handle(self, stream: SocketStream) -> None:
        async with stream:
            raw = b""
            while b"\r\n\r\n" not in raw:
                raw += await stream.receive()
            head, _, body = raw.partition(b"\r\n\r\n")
            length = 0
            for line in head.decode().split("\r\n")[1:]:
                key, _, value = line.partition(":")
                if key.lower() == "content-length":
                    length = int(value)
            while len(body) < length:
                body += await stream.receive()
            self.headers.append(head.decode())
            request = json.loads(body)
            self.requests.append(request)
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                              b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            for delta in self.respond(request):
                chunk = {"object": "chat.completion.chunk", "model": request.get("model"),
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                await self._event(stream, json.dumps(chunk))
            if self.hold:
                self.streaming.set()
                try:
                    while await stream.receive():
                        pass
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
                self.closed.append(time.monotonic())
                self.closed_event.set()
                return
            await self._event(stream, "[DONE]")
            await stream.send(b"0\r\n\r\n")

    @staticmethod
    async def _event(stream: SocketStream, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        await stream.send(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")


@asynccontextmanager
async def fake_chat_completions(respond: Respond, *, hold: bool = False
                                ) -> AsyncIterator[FakeChatCompletions]:
    """Serve a :class:`FakeChatCompletions` on a free loopback port (``.url`` is its base)."""
    fake = FakeChatCompletions(respond, hold=hold)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    fake.url = f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}/v1"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, fake._handle)
        try:
            yield fake
        finally:
            tg.cancel_scope.cancel()


def weather_script(city: str = "Paris") -> Respond:
    """First call: a tool call to get_weather; once a tool result is in the conversation: text
    that quotes the tool's answer (so a test sees the tool really ran)."""
    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return text_deltas("Let me check. ") + tool_call_deltas("get_weather", {"city": city})
        weather = json.loads(results[-1]["content"])["weather"]
        return text_deltas(f"In {city} it is ", weather, ".")
    return respond
