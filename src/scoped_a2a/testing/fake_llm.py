"""A fake OpenAI-compatible chat-completions endpoint on loopback, for tests and examples.

Agents that call a model (through pydantic-ai, Google ADK, or an a2a-sdk executor with httpx)
can be tested offline against it, including what matters most here: that a cancelled run
*closes* its model call. It is a raw AnyIO TCP server speaking just enough HTTP/1.1 (one request
per connection, then ``Connection: close``), so it sees exactly when a client drops its side.

``respond(body)`` turns each request's JSON body into the reply's chunks: a ``str`` is a text
delta, a :class:`ToolCall` a function call. A request with ``"stream": true`` gets them as SSE
``chat.completion.chunk`` events (``delay`` seconds apart), others one ``chat.completion`` body.
With ``hold=True`` a streamed reply sends its chunks and then waits for the client to leave (a
model call in flight to cancel). Each connection is a :class:`Connection`, whose
``closed_by_client`` is set when the client closed it before the reply was over.

    async with fake_chat_model(lambda body: ["Hello", " there"], hold=True) as llm:
        ...   # point the model client at llm.url (".../v1"); llm.in_flight is set mid-reply
        await llm.connections[0].closed_by_client.wait()

To run an example agent offline, serve it from a shell (a fixed reply that echoes the user's
last message; ``--tool NAME --args JSON`` calls a tool first) and point ``MODEL_URL`` at it::

    python -m scoped_a2a.testing.fake_llm --port 8001        # prints its URL; Ctrl-C stops it
    MODEL_URL=http://127.0.0.1:8001/v1 MODEL_NAME=fake python -m scoped_a2a serve ...

Runs on asyncio and trio. Never bind it anywhere but loopback.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream


@dataclass(frozen=True)
class ToolCall:
    """One function call in a reply: the tool's ``name`` and its ``args``."""

    name: str
    args: dict[str, Any]
    id: str = "call_0"


Chunk = str | ToolCall
Respond = Callable[[dict[str, Any]], Sequence[Chunk]]


def last_role(body: dict[str, Any]) -> str:
    """The role of the last message of a request (``tool`` once a tool's result is in)."""
    messages = body.get("messages") or [{}]
    return str(messages[-1].get("role", ""))


def tool_then_text(name: str, args: dict[str, Any], text: Sequence[str]) -> Respond:
    """Call tool ``name`` first; once its result is in the conversation, answer ``text``."""
    def respond(body: dict[str, Any]) -> list[Chunk]:
        return list(text) if last_role(body) == "tool" else [ToolCall(name, args)]
    return respond


@dataclass
class Connection:
    """One request to the fake model, and how its connection ended."""

    opened_at: float
    body: dict[str, Any] | None = None
    head: str = ""
    chunks_sent: int = 0
    closed_by_client: anyio.Event = field(default_factory=anyio.Event)
    closed_at: float | None = None


class FakeChatModel:
    """The endpoint; :func:`fake_chat_model` serves one. ``.url`` is its ``/v1`` base URL."""

    def __init__(self, respond: Respond, *, delay: float = 0.0, hold: bool = False,
                 model: str = "fake-model") -> None:
        self.respond = respond
        self.delay = delay
        self.hold = hold
        self.model = model
        self.connections: list[Connection] = []
        self.in_flight = anyio.Event()
        """Set when a held reply has sent its chunks and waits for the client."""
        self.url = ""

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received, in order."""
        return [c.body for c in self.connections if c.body is not None]

    async def handle(self, stream: SocketStream) -> None:
        """Answer one connection (the listener's handler)."""
        conn = Connection(opened_at=time.monotonic())
        self.connections.append(conn)
        async with stream:
            try:
                if not await _read_request(stream, conn):
                    return
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch_close, stream, conn, tg.cancel_scope)
                    await self._reply(stream, conn)
                    tg.cancel_scope.cancel()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
                    OSError):
                _closed(conn)

    async def _watch_close(self, stream: SocketStream, conn: Connection,
                           scope: anyio.CancelScope) -> None:
        # The client sends nothing after its request: any end of its side is a close.
        try:
            while await stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                OSError):
            pass
        _closed(conn)
        scope.cancel()

    async def _reply(self, stream: SocketStream, conn: Connection) -> None:
        assert conn.body is not None
        chunks = list(self.respond(conn.body))
        if not conn.body.get("stream"):
            await stream.send(_http("application/json", json.dumps(self._whole(chunks))))
            return
        await stream.send(_http("text/event-stream", None))
        for i, chunk in enumerate(chunks):
            if self.delay:
                await anyio.sleep(self.delay)
            await stream.send(_sse(self._chunk(chunk, i)))
            conn.chunks_sent += 1
        if self.hold:
            self.in_flight.set()
            await anyio.sleep_forever()
        finish = "tool_calls" if any(isinstance(c, ToolCall) for c in chunks) else "stop"
        await stream.send(_sse(self._frame({}, finish)))
        await stream.send(b"data: [DONE]\n\n")

    def _frame(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def _chunk(self, chunk: Chunk, i: int) -> dict[str, Any]:
        if isinstance(chunk, str):
            return self._frame({"role": "assistant", "content": chunk}, None)
        call = {"index": 0, "id": chunk.id, "type": "function",
                "function": {"name": chunk.name, "arguments": json.dumps(chunk.args)}}
        return self._frame({"role": "assistant", "tool_calls": [call]}, None)

    def _whole(self, chunks: list[Chunk]) -> dict[str, Any]:
        text = "".join(c for c in chunks if isinstance(c, str))
        calls = [{"id": c.id, "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(c.args)}}
                 for c in chunks if isinstance(c, ToolCall)]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@asynccontextmanager
async def fake_chat_model(respond: Respond, *, delay: float = 0.0, hold: bool = False,
                          model: str = "fake-model", port: int = 0
                          ) -> AsyncIterator[FakeChatModel]:
    """Serve a :class:`FakeChatModel` on loopback (``port``; 0: a free one) for the ``async
    with`` body. Raises OSError if the port is taken."""
    fake = FakeChatModel(respond, delay=delay, hold=hold, model=model)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    fake.url = f"http://127.0.0.1:{listener.extra(SocketAttribute.local_port)}/v1"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, fake.handle)
        try:
            yield fake
        finally:
            tg.cancel_scope.cancel()


def _closed(conn: Connection) -> None:
    if not conn.closed_by_client.is_set():
        conn.closed_at = time.monotonic()
        conn.closed_by_client.set()


def _http(content_type: str, body: str | None) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n"
    if body is None:
        return (head + "\r\n").encode()
    data = body.encode()
    return (head + f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def _read_request(stream: SocketStream, conn: Connection) -> bool:
    """Read one request's head and JSON body into ``conn``; False if the client left first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            buf += await stream.receive()
        except anyio.EndOfStream:
            return False
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        rest += await stream.receive()
    conn.head = head.decode("latin-1")
    conn.body = json.loads(rest[:length] or b"{}")
    return True


def echo(body: dict[str, Any]) -> list[Chunk]:
    """A reply that repeats the user's last message, word by word (the command line's)."""
    said = ""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            said = content if isinstance(content, str) else " ".join(
                str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            break
    words = f"(fake model) you said: {said}".split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def main(argv: list[str] | None = None) -> None:
    """``python -m scoped_a2a.testing.fake_llm``: serve :func:`echo` (or a tool call first,
    then it) until interrupted, for trying an example agent with no model and no key."""
    parser = argparse.ArgumentParser(
        prog="python -m scoped_a2a.testing.fake_llm",
        description="A fake OpenAI-compatible chat-completions endpoint on 127.0.0.1, for "
                    "running the model examples offline (MODEL_URL=http://127.0.0.1:PORT/v1).")
    parser.add_argument("--port", type=int, default=8001, help="the port (default 8001)")
    parser.add_argument("--delay", type=float, default=0.05,
                        help="seconds between streamed chunks (default 0.05)")
    parser.add_argument("--tool", help="call this tool first (once its result is in, reply)")
    parser.add_argument("--args", default="{}", help="the tool call's arguments, as JSON")
    opts = parser.parse_args(argv)
    try:
        args = json.loads(opts.args)
    except ValueError as exc:
        parser.error(f"--args is not JSON: {exc}")
    if not isinstance(args, dict):
        parser.error("--args must be a JSON object")

    def respond(body: dict[str, Any]) -> list[Chunk]:
        if opts.tool is not None and last_role(body) != "tool":
            return [ToolCall(opts.tool, args)]
        return echo(body)

    async def serve() -> None:
        async with fake_chat_model(respond, delay=opts.delay, port=opts.port) as fake:
            print(f"fake model on {fake.url} (set MODEL_URL={fake.url}); Ctrl-C stops it",
                  flush=True)
            await anyio.sleep_forever()

    try:
        anyio.run(serve)
    except OSError as exc:
        raise SystemExit(f"cannot listen on 127.0.0.1:{opts.port}: {exc.strerror}") from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
