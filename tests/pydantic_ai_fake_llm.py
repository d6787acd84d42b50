"""A fake OpenAI-compatible chat-completions endpoint on loopback, for cancel and example tests.

A raw AnyIO TCP server speaking just enough HTTP/1.1: it reads one request per connection,
answers ``POST .../chat/completions`` with the chunks a script gives (streamed as SSE when the
request asks for a stream, one JSON body otherwise), then closes the connection. Between chunks
it waits ``delay`` seconds; with ``stall_after=N`` it sends N chunks and then waits forever, so a
test has a model call in flight to cancel.

Each connection is recorded with an event set when the *client* closed it (EOF while the
server still had more to send, or was waiting): that is how a test proves the model's HTTP call
was aborted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import SocketStream, TaskStatus

Chunk = str | dict[str, Any]
"""A text delta, or ``{"tool": name, "args": {...}}`` for one tool call."""


def last_role(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    return str(messages[-1].get("role", ""))


def tool_then_text(tool: str, args: dict[str, Any], text: Sequence[str]) -> Callable[
        [dict[str, Any]], list[Chunk]]:
    """A script: call ``tool`` first; once its result is in the conversation, answer ``text``."""
    def script(body: dict[str, Any]) -> list[Chunk]:
        if last_role(body) == "tool":
            return list(text)
        return [{"tool": tool, "args": args}]
    return script


@dataclass
class Connection:
    opened_at: float
    body: dict[str, Any] | None = None
    chunks_sent: int = 0
    closed_by_client: anyio.Event = field(default_factory=anyio.Event)
    closed_at: float | None = None


class FakeLLM:
    def __init__(self, script: Callable[[dict[str, Any]], list[Chunk]], *, delay: float = 0.0,
                 stall_after: int | None = None, model: str = "fake-model") -> None:
        self.script = script
        self.delay = delay
        self.stall_after = stall_after
        self.model = model
        self.connections: list[Connection] = []
        self.stalled = anyio.Event()
        """Set when a response has sent its ``stall_after`` chunks and waits forever."""
        self.url = ""

    async def serve(self, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the base URL (``http://127.0.0.1:PORT/v1``)."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            self.url = f"http://127.0.0.1:{port}/v1"
            task_status.started(self.url)
            await listener.serve(self._handle)

    async def _handle(self, stream: SocketStream) -> None:
        conn = Connection(opened_at=time.monotonic())
        self.connections.append(conn)
        async with stream:
            try:
                conn.body = await _read_request(stream)
                if conn.body is None:
                    return
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch_eof, stream, conn, tg.cancel_scope)
                    await self._respond(stream, conn)
                    tg.cancel_scope.cancel()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
                self._closed(conn)

    def _closed(self, conn: Connection) -> None:
        if not conn.closed_by_client.is_set():
            conn.closed_at = time.monotonic()
            conn.closed_by_client.set()

    async def _watch_eof(self, stream: SocketStream, conn: Connection,
                         scope: anyio.CancelScope) -> None:
        # The client sends nothing after its request: any end of its side is a close.
        try:
            while await stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        self._closed(conn)
        scope.cancel()

    async def _respond(self, stream: SocketStream, conn: Connection) -> None:
        assert conn.body is not None
        chunks = self.script(conn.body)
        if not conn.body.get("stream"):
            await _send_all(stream, _http(200, "application/json",
                                          json.dumps(self._completion(chunks)).encode()))
            return
        await _send_all(stream, _http(200, "text/event-stream", None))
        for i, chunk in enumerate(chunks):
            if self.stall_after is not None and i >= self.stall_after:
                self.stalled.set()
                await anyio.sleep_forever()
            if self.delay:
                await anyio.sleep(self.delay)
            await _send_all(stream, _sse(self._chunk(chunk, i)))
            conn.chunks_sent += 1
        if self.stall_after is not None and len(chunks) <= self.stall_after:
            self.stalled.set()
            await anyio.sleep_forever()
        finish = "tool_calls" if any(isinstance(c, dict) for c in chunks) else "stop"
        await _send_all(stream, _sse(self._frame({}, finish)))
        await _send_all(stream, b"data: [DONE]\n\n")

    def _frame(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def _chunk(self, chunk: Chunk, i: int) -> dict[str, Any]:
        if isinstance(chunk, str):
            return self._frame({"role": "assistant", "content": chunk}, None)
        call = {"index": 0, "id": f"call_{i}", "type": "function",
                "function": {"name": chunk["tool"], "arguments": json.dumps(chunk["args"])}}
        return self._frame({"role": "assistant", "tool_calls": [call]}, None)

    def _completion(self, chunks: list[Chunk]) -> dict[str, Any]:
        text = "".join(c for c in chunks if isinstance(c, str))
        calls = [{"id": f"call_{i}", "type": "function",
                  "function": {"name": c["tool"], "arguments": json.dumps(c["args"])}}
                 for i, c in enumerate(chunks) if isinstance(c, dict)]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def _http(status: int, content_type: str, body: bytes | None) -> bytes:
    head = f"HTTP/1.1 {status} OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n"
    if body is None:
        return (head + "\r\n").encode()
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def _send_all(stream: SocketStream, data: bytes) -> None:
    await stream.send(data)


async def _read_request(stream: SocketStream) -> dict[str, Any] | None:
    """Read one request's head and body; its JSON body (None if the client left first)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            buf += await stream.receive()
        except anyio.EndOfStream:
            return None
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        rest += await stream.receive()
    body: dict[str, Any] = json.loads(rest[:length] or b"{}")
    return body
