"""A scoped-a2a agent behind a proxy that breaks the follower's reads (scenarios 4 and 6).

One process: the benchmark agent served by hypercorn on a private port, and in front of it, on
``--port``, a small TCP proxy that forwards each HTTP request (one request per connection: it asks
the agent to close after answering) except the reads a follower makes (the trajectory extension's
cursor read, ``SubscribeToTask``), where it misbehaves:

- ``close``: every follower read has its connection closed without an answer;
- ``gone``: follower reads are answered while the task runs; once the task has ended the agent is
  "gone" for them and every read has its connection closed (the agent of the original incident,
  which went away after the turn);
- ``random`` (the soak): every task's follower reads start failing (connection closed) at a
  random moment between 0 and 0.6 s after its first read, mid-turn or after it; and any request
  at all (sends included) is, with probability ``--fault-rate``, closed at once, answered 500,
  or cut mid-answer.

Every follower read that hits a fault is reported on the side channel (``fault`` with a unique
key prefixed by the task id) with its time, so the generator can count the failed reads that
came after a turn ended, whichever client made them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from typing import Any

import anyio
from anyio.abc import SocketStream

from benchmarks.sidechannel import signal
from scoped_a2a import A2AApp, RunPolicy, serve
from scoped_a2a.cli import load_agent
from scoped_a2a.protocol.trajectory import TRAJECTORY_READ_METHOD

FOLLOWER_METHODS = frozenset({TRAJECTORY_READ_METHOD, "SubscribeToTask", "tasks/resubscribe"})
_EOF = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
_seq = itertools.count()


class Proxy:
    def __init__(self, app: A2AApp, upstream: int, fault: str, rate: float) -> None:
        self.app = app
        self.upstream = upstream
        self.fault = fault
        self.rate = rate
        self.rng = random.Random(6)
        self.gone_at: dict[str, float] = {}

    async def handle(self, client: SocketStream) -> None:
        async with client:
            try:
                head, body = await _read_request(client)
            except _EOF:
                return
            method, task_id = _method_and_task(body)
            action = await self._action(method, task_id)
            if action == "close":
                if method in FOLLOWER_METHODS:
                    signal("fault", f"{task_id}-{next(_seq)}")
                return
            if action == "500":
                if method in FOLLOWER_METHODS:
                    signal("fault", f"{task_id}-{next(_seq)}")
                await client.send(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n"
                                  b"connection: close\r\n\r\nboom")
                return
            await self._forward(client, head, body, cut=action == "cut")

    async def _action(self, method: str | None, task_id: str | None) -> str:
        if self.fault == "close":
            return "close" if method in FOLLOWER_METHODS else "forward"
        if self.fault == "gone":
            if method in FOLLOWER_METHODS and task_id is not None:
                try:
                    task, _ = await self.app.store.get(task_id)
                except Exception:
                    return "close"
                if task.status.state.terminal:
                    return "close"
            return "forward"
        if self.fault == "random":
            if method in FOLLOWER_METHODS and task_id is not None:
                now = anyio.current_time()
                if now >= self.gone_at.setdefault(task_id, now + self.rng.uniform(0.0, 0.6)):
                    return "close"
            if method is not None and self.rng.random() < self.rate:
                return self.rng.choice(("close", "500", "cut"))
        return "forward"

    async def _forward(self, client: SocketStream, head: bytes, body: bytes, *, cut: bool) -> None:
        lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
        request = b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body
        async with await anyio.connect_tcp("127.0.0.1", self.upstream) as upstream:
            await upstream.send(request)
            async with anyio.create_task_group() as tg:

                async def client_gone() -> None:
                    try:
                        while await client.receive():
                            pass
                    except _EOF:
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(client_gone)
                try:
                    while True:
                        chunk = await upstream.receive()
                        if cut:  # half an answer, then the line goes dead
                            await client.send(chunk[: max(1, len(chunk) // 2)])
                            break
                        await client.send(chunk)
                except _EOF:
                    pass
                tg.cancel_scope.cancel()


async def _read_request(stream: SocketStream) -> tuple[bytes, bytes]:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = await stream.receive()
        buffer += chunk
        if len(buffer) > 1 << 20:
            raise anyio.EndOfStream
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        rest += await stream.receive()
    return head, rest[:length]


def _method_and_task(body: bytes) -> tuple[str | None, str | None]:
    try:
        value: Any = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    params = value.get("params") if isinstance(value.get("params"), dict) else {}
    task_id = params.get("taskId") or params.get("id")
    return value.get("method"), task_id if isinstance(task_id, str) else None


async def main(args: argparse.Namespace) -> None:
    app = A2AApp(load_agent(args.agent), public_url=f"http://127.0.0.1:{args.port}/",
                 policy=RunPolicy.from_rules(args.detach_metadata), grace=0.5)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=args.port,
                                               backlog=1024)
    async with anyio.create_task_group() as tg:
        upstream = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, grace=0.5, task_status=task_status))
        proxy = Proxy(app, upstream, args.fault, args.fault_rate)
        async with listener:
            await listener.serve(proxy.handle)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server", default="hypercorn-asyncio", choices=["hypercorn-asyncio",
                                                                     "hypercorn-trio"])
    p.add_argument("--agent", default="benchmarks.agents:bench_agent")
    p.add_argument("--fault", choices=["close", "gone", "random", "none"], default="close")
    p.add_argument("--fault-rate", type=float, default=0.05)
    p.add_argument("--detach-metadata", action="append", default=[])
    a = p.parse_args()
    anyio.run(main, a, backend=a.server.removeprefix("hypercorn-"))
