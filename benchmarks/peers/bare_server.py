"""A bare ASGI app answering the same JSON the A2A servers send: the ceiling of the HTTP stack.

It reads the whole request body like a real app, then answers a ``SendMessage`` with a fixed
completed-task response of the same shape and size as scoped-a2a's echo answer, and a
``SendStreamingMessage`` with a fixed stream of 103 events (task, working, 100 artifact chunks,
completed), one ``send`` per event. No A2A logic at all: whatever the A2A servers cost on top of
this is theirs.

For the fan-out scenario it also plays the fan-out agent (``fanout KEY M INTERVAL``): the send
is answered at once, a task in the lifespan's task group signals ``start``, waits for the
go-file and broadcasts M stamped events INTERVAL apart; each ``SubscribeToTask`` answers the
task, then writes each event as it comes (waiting on one shared event, no task of its own).
That is the floor of an idle stream and of delivery on each server: one request coroutine per
subscriber, no disconnect watching, no store.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup

from benchmarks.agents import GO_POLL, GO_TIMEOUT
from benchmarks.peers._serve import arguments, run
from benchmarks.sidechannel import go_file, signal

_TASK = {"id": "0" * 32, "contextId": "1" * 32, "status": {
    "state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00.000Z"},
    "artifacts": [{"artifactId": "2" * 32, "name": "echo", "parts": [{"text": "echo: echo hi"}]}],
    "history": [{"messageId": "m-0000000000", "contextId": "1" * 32, "taskId": "0" * 32,
                 "role": "ROLE_USER", "parts": [{"text": "echo hi"}]}]}
SEND_ANSWER = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": _TASK}},
                         separators=(",", ":")).encode()
CARD = json.dumps({"name": "bare", "supportedInterfaces": []}).encode()


def _frame(i: int, result: dict[str, Any]) -> bytes:
    data = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}, separators=(",", ":"))
    return f"id: {i}\ndata: {data}\n\n".encode()


def _stream_frames() -> list[bytes]:
    ids = {"taskId": "0" * 32, "contextId": "1" * 32}
    frames = [_frame(0, {"task": {**_TASK, "status": {"state": "TASK_STATE_SUBMITTED"}}}),
              _frame(1, {"statusUpdate": {**ids, "status": {"state": "TASK_STATE_WORKING"}}})]
    for i in range(100):
        art = {"artifactId": "s", "name": "stream", "parts": [{"text": f"{i} "}]}
        frames.append(_frame(i + 2, {"artifactUpdate": {**ids, "artifact": art,
                                                        "append": i > 0, "lastChunk": i == 99}}))
    frames.append(_frame(102, {"statusUpdate": {**ids,
                                                "status": {"state": "TASK_STATE_COMPLETED"}}}))
    return frames


STREAM_FRAMES = _stream_frames()


class Broadcast:
    """One fan-out task's events so far, and the event its subscribers wait on."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.ended = False
        self.changed = anyio.Event()

    def publish(self, frame: bytes, last: bool) -> None:
        self.frames.append(frame)
        self.ended = last
        self.changed.set()
        self.changed = anyio.Event()


_broadcasts: dict[str, Broadcast] = {}
_background: list[TaskGroup] = []  # the lifespan's task group, once started


async def _emit(task_id: str, key: str, m: int, interval: float) -> None:
    """What the fan-out agent does (benchmarks/agents.py), without a framework."""
    broadcast = _broadcasts[task_id]
    signal("start", key)
    path = go_file(key)
    with anyio.fail_after(GO_TIMEOUT):
        while path is not None and not os.path.exists(path):
            await anyio.sleep(GO_POLL)
    ids = {"taskId": task_id, "contextId": "1" * 32}
    for i in range(m):
        art = {"artifactId": "fan", "name": "fan", "parts": [
            {"text": f"fan {i} @T{time.monotonic():.9f}@"}]}
        broadcast.publish(_frame(i + 1, {"artifactUpdate": {
            **ids, "artifact": art, "append": i > 0, "lastChunk": i == m - 1}}), i == m - 1)
        await anyio.sleep(interval)
    del _broadcasts[task_id]


async def _fanout_send(send: Any, text: str) -> None:
    _, key, m, interval = text.split()
    task_id = f"fan-{key}"
    _broadcasts[task_id] = Broadcast()
    _background[0].start_soon(_emit, task_id, key, int(m), float(interval))
    task = {**_TASK, "id": task_id, "status": {"state": "TASK_STATE_WORKING"}}
    await _whole(send, json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"task": task}},
                                  separators=(",", ":")).encode())


async def _subscribe(send: Any, task_id: str) -> None:
    broadcast = _broadcasts.get(task_id)
    if broadcast is None:
        await _whole(send, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32001,'
                           b'"message":"task not found"}}')
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"),
                            (b"cache-control", b"no-cache")]})
    task = {**_TASK, "id": task_id, "status": {"state": "TASK_STATE_WORKING"}}
    await send({"type": "http.response.body", "body": _frame(0, {"task": task}),
                "more_body": True})
    sent = 0
    while True:
        while sent < len(broadcast.frames):
            await send({"type": "http.response.body", "body": broadcast.frames[sent],
                        "more_body": True})
            sent += 1
        if broadcast.ended:
            break
        await broadcast.changed.wait()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _lifespan(receive: Any, send: Any) -> None:
    # hypercorn's trio worker needs the protocol; the task group runs the fan-out broadcasts.
    async with anyio.create_task_group() as background:
        _background.append(background)
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                background.cancel_scope.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    if scope["method"] == "GET":
        await _whole(send, CARD)
    elif b"SubscribeToTask" in body:
        await _subscribe(send, json.loads(body)["params"]["id"])
    elif b'"fanout ' in body:
        await _fanout_send(send, json.loads(body)["params"]["message"]["parts"][0]["text"])
    elif b"SendStreamingMessage" in body:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"),
                                (b"cache-control", b"no-cache")]})
        for frame in STREAM_FRAMES:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    else:
        await _whole(send, SEND_ANSWER)


async def _whole(send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    args = arguments(__doc__.splitlines()[0]).parse_args()
    run(app, args.server, args.port)
