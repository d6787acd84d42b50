"""A blocking send waits for its run in the request's own task (no watcher task): the run's end
racing the caller's hang-up, tick by tick, on asyncio, trio and trio's mock clock.

The send reads the caller's connection while it waits, inside a cancel scope that the run
cancels as it settles (``Run.wake_when_settled``); before that it lets the run take its first
step. So the hang-up and the run's end can land in either order, in the same tick or a few
apart, and at each point of that path: while the run has not begun, between its first step
and the wait, during the wait, and as the wake-up is delivered. Whatever the order, every
promise holds: the task ends (``completed`` only if the agent returned, else ``canceled`` with
reason ``hang-up``), the caller gets exactly one answer holding that end (a hang-up is answered
too: it may be a half-close), the run is gone from the runner, and the store keeps no pin.

Driven in-process through the ASGI app (as ``benchmarks.inproc`` does): only there can a
hang-up be placed on an exact tick. The HTTP tests (test_cancel_race, test_connections) cover
the same promises through hypercorn.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from trio.testing import MockClock

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.store.memory import MemoryTaskStore

pytestmark = pytest.mark.anyio

TICKS = range(6)


@pytest.fixture(params=["asyncio", "trio", "trio-mock-clock"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "trio-mock-clock":
        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return request.param


_SCOPE = {"type": "http", "method": "POST", "path": "/", "root_path": "", "query_string": b"",
          "headers": [(b"content-type", b"application/json"), (b"a2a-version", b"1.0")]}


def _body(n: int, *, history_length: int | None = None) -> bytes:
    params: dict[str, Any] = {"message": {"messageId": f"m{n}", "role": "ROLE_USER",
                                          "parts": [{"text": "hello"}]}}
    if history_length is not None:
        params["configuration"] = {"historyLength": history_length}
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "SendMessage",
                       "params": params}).encode()


async def _ticks(n: int) -> None:
    for _ in range(n):
        await anyio.lowlevel.checkpoint()


class Caller:
    """One ASGI request whose client hangs up ``hangup_after`` ticks after it starts (None:
    stays); records every body the app sends."""

    def __init__(self, body: bytes, hangup_after: int | None) -> None:
        self.pending = [{"type": "http.request", "body": body, "more_body": False}]
        self.hangup_after = hangup_after
        self.gone = anyio.Event()
        self.bodies: list[bytes] = []

    async def receive(self) -> dict[str, Any]:
        if self.pending:
            return self.pending.pop()
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])

    async def hang_up(self) -> None:
        assert self.hangup_after is not None
        await _ticks(self.hangup_after)
        self.gone.set()

    async def call(self, app: A2AApp) -> None:
        async with anyio.create_task_group() as tg:
            if self.hangup_after is not None:
                tg.start_soon(self.hang_up)
            await app(_SCOPE, self.receive, self.send)

    def answer(self) -> dict[str, Any]:
        assert len(self.bodies) == 1, f"expected one answer, got {self.bodies!r}"
        return json.loads(self.bodies[0])  # type: ignore[no-any-return]


def _reason(task: Any) -> str | None:
    message = task.status.message
    return (message.metadata or {}).get("reason") if message is not None else None


async def _settle(app: A2AApp) -> None:
    with anyio.fail_after(5):
        while app.runner.active:
            await anyio.sleep(0.001)


async def test_the_end_racing_the_hangup_tick_by_tick() -> None:
    """Every (agent ends after j ticks, caller hangs up after k ticks) pair, j, k in 0..5,
    and each j with a caller that stays (k None: answered by the run's wake-up alone)."""
    returned: set[str] = set()

    async def agent(ctx: RunContext) -> str:
        await _ticks(int(ctx.message.parts[0].text or "0"))
        returned.add(ctx.task_id)
        return "done"

    store = MemoryTaskStore()
    app = A2AApp(agent, store=store)
    outcomes: dict[tuple[int, int | None], str] = {}
    async with app.running():
        n = 0
        for j in TICKS:
            for k in (*TICKS, None):
                n += 1
                body = json.loads(_body(n))
                body["params"]["message"]["parts"][0]["text"] = str(j)
                caller = Caller(json.dumps(body).encode(), hangup_after=k)
                with anyio.fail_after(10):  # a lost wake-up would hang here
                    await caller.call(app)
                await _settle(app)
                answer = caller.answer()
                assert "result" in answer, f"j={j} k={k}: {answer}"
                task_id = answer["result"]["task"]["id"]
                task, _ = await store.get(task_id)
                state = task.status.state.name.lower()
                where = f"j={j} k={k}: {state} ({_reason(task)}), answered " \
                        f"{answer['result']['task']['status']['state']}"
                # The caller's answer holds the task's end, whichever came first.
                assert answer["result"]["task"]["status"]["state"] == task.status.state.value, \
                    where
                if task_id in returned:
                    assert state == "completed", where
                else:  # the agent did not return: its run was cancelled by the hang-up
                    assert state == "canceled" and _reason(task) == "hang-up", where
                assert store._tasks[task_id].pins == 0, where  # no pin left behind
                outcomes[(j, k)] = state
    # The matrix holds both outcomes: runs that end at once complete, hang-ups that come
    # first cancel (so the race was really run both ways).
    assert outcomes[(0, 0)] == "completed" and outcomes[(5, 0)] == "canceled", outcomes
    assert set(outcomes.values()) == {"completed", "canceled"}, outcomes
    assert all(outcomes[(j, None)] == "completed" for j in TICKS), outcomes


async def test_a_run_that_waits_is_woken_and_a_hangup_during_it_cancels_at_once() -> None:
    """A run that suspends (the send waits in its cancel scope): its end wakes the send; a
    hang-up during the wait cancels it (reason hang-up) before the agent's sleep is over."""
    finished: list[str] = []

    async def agent(ctx: RunContext) -> str:
        await anyio.sleep(float(ctx.message.parts[0].text or "0"))
        finished.append(ctx.task_id)
        return "slept"

    store = MemoryTaskStore()
    app = A2AApp(agent, store=store)
    async with app.running():
        for n, (sleep, hangup) in enumerate([(0.05, None), (30.0, 3)], 1):
            body = json.loads(_body(n))
            body["params"]["message"]["parts"][0]["text"] = str(sleep)
            caller = Caller(json.dumps(body).encode(), hangup_after=hangup)
            with anyio.fail_after(10):  # a 30 s sleep: only a cancellation ends it in time
                await caller.call(app)
            await _settle(app)
            task = caller.answer()["result"]["task"]
            stored, _ = await store.get(task["id"])
            if hangup is None:
                assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
                assert finished == [task["id"]]
            else:
                assert stored.status.state.value == task["status"]["state"] \
                    == "TASK_STATE_CANCELED", task
                assert _reason(stored) == "hang-up"
            assert store._tasks[task["id"]].pins == 0


async def test_the_answer_from_the_stored_json_matches_the_decoded_one() -> None:
    """The ended task sent on as the store keeps it is the answer send_answer would build;
    with historyLength (trimmed), a direct reply (a message) and an input-required task,
    the answer is built from the task instead."""
    from scoped_a2a.protocol.dialect import V10_DIALECT
    from scoped_a2a.protocol.types import Message, Part, Role
    from scoped_a2a.server.answers import send_answer

    async def agent(ctx: RunContext) -> Any:
        text = ctx.message.parts[0].text
        if text == "reply":
            return Message(message_id="r1", role=Role.AGENT, parts=[Part(text="hi")])
        if text == "ask":
            return await ctx.ask("which one?")
        return "done"

    store = MemoryTaskStore()
    app = A2AApp(agent, store=store)
    async with app.running():
        plain = Caller(_body(1), None)
        await plain.call(app)
        task = plain.answer()["result"]["task"]
        stored, _ = await store.get(task["id"])
        assert app.runner.get(task["id"]) is None
        built = send_answer(V10_DIALECT, stored, None)
        assert json.loads(built) == plain.answer()["result"]

        trimmed = Caller(_body(2, history_length=0), None)
        await trimmed.call(app)
        assert "history" not in trimmed.answer()["result"]["task"]

        for n, text in ((3, "reply"), (4, "ask")):
            body = json.loads(_body(n))
            body["params"]["message"]["parts"][0]["text"] = text
            caller = Caller(json.dumps(body).encode(), None)
            with anyio.fail_after(10):
                await caller.call(app)
            result = caller.answer()["result"]
            if text == "reply":
                assert result["message"]["parts"][0]["text"] == "hi", result
            else:
                assert result["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", result
                await app.runner.cancel_task(result["task"]["id"])


async def test_bounded_arms_its_deadline_only_for_an_await_that_waits() -> None:
    """server/eager.py: an await that finishes at once never arms its scope; one that waits
    has its deadline and shield before its first wait (a deadline ends it; a shield keeps out
    an outer cancellation); scopes the awaitable opens before waiting nest inside (trio's
    sleep opens one: entering ours after it would corrupt the scope stack); its result or
    error comes back as from a plain await."""
    from scoped_a2a.server.closing import ClosingDeadlines, LazyDeadline
    from scoped_a2a.server.eager import bounded

    armed: list[LazyDeadline] = []

    class Watched(LazyDeadline):
        def arm(self) -> None:
            armed.append(self)
            super().arm()

    async def at_once() -> str:
        return "now"

    async def after(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "later"

    async def in_own_scope() -> str:
        with anyio.CancelScope():
            await anyio.sleep(0.01)
        return "nested"

    async def fails() -> str:
        await anyio.lowlevel.checkpoint()
        raise ValueError("bad")

    assert await bounded(at_once(), Watched(60)) == "now" and armed == []
    assert await bounded(after(0), Watched(60)) == "later" and len(armed) == 1
    assert await bounded(in_own_scope(), Watched(60)) == "nested"
    with pytest.raises(ValueError, match="bad"):
        await bounded(fails(), Watched(60))
    # A deadline that passes while it waits ends it: None, the awaitable cancelled.
    assert await bounded(after(60), Watched(0.05)) is None
    # A shield in place before the first wait: the outer cancellation does not cut it.
    with anyio.CancelScope() as outer:
        outer.cancel()
        assert await bounded(after(0.01), Watched(60, shield=True)) == "later"
    # The closing kind: tracked (and cut short by close()) only once armed.
    closing = ClosingDeadlines(0.05)
    assert await bounded(at_once(), closing.scope(60, lazy=True)) == "now"
    assert closing.open == 0

    async def close_soon() -> None:
        await anyio.sleep(0.01)
        assert closing.open == 1  # the waiting one, armed
        closing.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(close_soon)
        assert await bounded(after(60), closing.scope(60, lazy=True)) is None
    assert closing.open == 0
