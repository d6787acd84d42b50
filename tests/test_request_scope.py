"""One cancel scope per JSON-RPC request (and per HTTP+JSON request with a body), armed for the
body's first read and for a blocking send's final write (server/closing.py, RequestScope): each
deadline still does what its own scope did, on both bindings.

Driven in-process through the ASGI app, on asyncio, trio and trio's mock clock (where a body
arriving exactly at its deadline lands in the same tick as the deadline): a stalled body gets
its 408 (answered once the request's scope is left, so the cancellation does not swallow the
answer); a body that arrives as its deadline passes is either refused with no task made, or
answered in full, never half (a task made and then cancelled); a final answer the client does
not take ends the request at the write deadline, with the task kept completed; a body and
answer that do not wait leave no deadline behind (no open scope counted for shutdown).
"""

from __future__ import annotations

import gc
import json
from types import FrameType
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from scoped_a2a import A2AApp, RunContext

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio", "trio-mock-clock"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "trio-mock-clock":
        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return request.param


_SCOPE = {"type": "http", "method": "POST", "path": "/", "root_path": "", "query_string": b"",
          "headers": [(b"content-type", b"application/json"), (b"a2a-version", b"1.0")]}

_PARAMS = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}
_REQUESTS = {  # binding: (path, body of a blocking send)
    "JSON-RPC": ("/", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                  "params": _PARAMS}).encode()),
    "HTTP+JSON": ("/message:send", json.dumps(_PARAMS).encode()),
}


@pytest.fixture(params=list(_REQUESTS))
def binding(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def echo(ctx: RunContext) -> str:
    return "echo"


async def _call(app: A2AApp, receive: Any, send: Any | None = None,
                binding: str = "JSON-RPC") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def record(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({**_SCOPE, "path": _REQUESTS[binding][0]}, receive, send or record)
    return sent


def _status_and_body(sent: list[dict[str, Any]]) -> tuple[int, bytes]:
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"], sent
    return sent[0]["status"], sent[1]["body"]


async def test_a_stalled_body_gets_408(binding: str) -> None:
    app = A2AApp(echo, body_timeout=0.2)

    async def receive() -> dict[str, Any]:
        await anyio.sleep(30)
        raise AssertionError("the body's deadline did not end the read")

    async with app.running():
        with anyio.fail_after(10):
            status, body = _status_and_body(await _call(app, receive, binding=binding))
        assert status == 408, body
        assert b"did not arrive within 0.2 s" in body, body
        assert app.bodies._reading.open == 0
        assert app.store._tasks == {}  # no task was made


@pytest.mark.parametrize("early", [0.0, 1e-9, 0.001])
async def test_a_body_arriving_as_its_deadline_passes_is_refused_or_answered_whole(
    early: float, binding: str,
) -> None:
    app = A2AApp(echo, body_timeout=0.2)

    async def receive() -> dict[str, Any]:
        await anyio.sleep(0.2 - early)
        return {"type": "http.request", "body": _REQUESTS[binding][1], "more_body": False}

    async with app.running():
        with anyio.fail_after(10):
            status, body = _status_and_body(await _call(app, receive, binding=binding))
        tasks = [await app.store.get(t) for t in list(app.store._tasks)]
        if status == 408:
            assert tasks == [], f"refused, yet a task was made: {tasks}"
        else:
            assert status == 200 and b"TASK_STATE_COMPLETED" in body, (status, body)
            assert [t.status.state.name for t, _ in tasks] == ["COMPLETED"], tasks
        assert app.bodies._reading.open == 0


async def test_a_final_answer_not_taken_ends_at_the_write_deadline(binding: str) -> None:
    app = A2AApp(echo, stream_write_timeout=0.3)
    pending = [{"type": "http.request", "body": _REQUESTS[binding][1], "more_body": False}]
    started = anyio.Event()

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await anyio.sleep(60)  # the client stays, but does not read
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            started.set()
            await anyio.sleep(60)  # never taken

    async with app.running():
        with anyio.fail_after(10):
            before = anyio.current_time()
            await _call(app, receive, send, binding)
            took = anyio.current_time() - before
        assert started.is_set()
        assert 0.3 <= took < 5, took
        assert app.final_writes.open == 0
        assert app.open_requests == 0
        [task_id] = app.store._tasks
        task, _ = await app.store.get(task_id)
        assert task.status.state.name == "COMPLETED"


async def test_a_body_and_answer_that_do_not_wait_arm_nothing(binding: str) -> None:
    app = A2AApp(echo)
    pending = [{"type": "http.request", "body": _REQUESTS[binding][1], "more_body": False}]
    opened: list[int] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await anyio.sleep(60)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        opened.append(app.bodies._reading.open + app.final_writes.open)

    async with app.running():
        with anyio.fail_after(10):
            await _call(app, receive, send, binding)
    assert opened == [0, 0], opened


@pytest.mark.parametrize("limit", ["max_body_bytes", "max_body_memory"])
async def test_a_refused_body_is_freed_with_its_request_not_by_the_cycle_collector(
    limit: str, binding: str,
) -> None:
    """The answer to a refused body (413, or 503 over the memory bound) is carried out of the
    request's scope as data, not as the exception: a kept exception's traceback holds the body
    read so far, and on Python 3.12+ its frames and the request's frame form a cycle that only
    the cyclic collector frees (on 3.13 hundreds of 63.5 KiB beginnings piled up in
    test_body_hostile). With the collector off, nothing of the request may be left for it."""
    app = (A2AApp(echo, max_body_bytes=100 << 10) if limit == "max_body_bytes"
           else A2AApp(echo, max_body_memory=100 << 10))
    piece = b" " * (40 << 10)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": piece, "more_body": True}  # never ends

    holding = [{"type": "http.request", "body": b" " * (60 << 10), "more_body": True}]
    held = anyio.Event()

    async def hold() -> dict[str, Any]:  # another request's unfinished body fills the bound
        if holding:
            return holding.pop()
        held.set()
        await anyio.sleep(60)
        return {"type": "http.disconnect"}

    async with app.running(), anyio.create_task_group() as tg:
        if limit == "max_body_memory":
            tg.start_soon(_call, app, hold, None, binding)
            await held.wait()
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            with anyio.fail_after(10):
                status, body = _status_and_body(await _call(app, receive, binding=binding))
            gc.collect()
            left = [o for o in gc.garbage if isinstance(o, FrameType)
                    and o.f_code.co_filename.endswith("body.py")]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        tg.cancel_scope.cancel()
        assert status == (413 if limit == "max_body_bytes" else 503), body
        assert left == [], f"left to the cycle collector: {left[:5]}"
    assert (app.bodies.held, app.bodies.held_first) == (0, 0)
