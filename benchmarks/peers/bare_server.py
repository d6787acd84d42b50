"""A bare ASGI app answering the same JSON the A2A servers send: the ceiling of the HTTP stack.

It reads the whole request body like a real app, then answers a ``SendMessage`` with a fixed
completed-task response of the same shape and size as scoped-a2a's echo answer, and a
``SendStreamingMessage`` with a fixed stream of 103 events (task, working, 100 artifact chunks,
completed), one ``send`` per event. No A2A logic at all: whatever the A2A servers cost on top of
this is theirs.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks.peers._serve import arguments, run

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


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":  # hypercorn's trio worker needs the protocol
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
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
