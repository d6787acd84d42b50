"""JSON-RPC and HTTP+JSON are two thin bindings over one method layer: the same scenarios, run
over both against real hypercorn (asyncio and trio), give the same outcomes.

Each scenario drives a :class:`Wire` (raw HTTP, built here independently of the server and of
our client) and returns a normalized outcome; the test runs it once per binding, on a fresh
app each time, and asserts the outcomes are equal (errors compare by their A2A code; REST also
checks the HTTP status the spec's mapping gives).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.push import PushSettings

from .helpers import served, sse_events, text_message
from .push_receiver import Receiver, eventually, receiving

pytestmark = pytest.mark.anyio

# ErrorInfo reason -> A2A code, and the HTTP status the REST binding must answer it with.
REASONS = {"TASK_NOT_FOUND": (-32001, 404), "TASK_NOT_CANCELABLE": (-32002, 400),
           "UNSUPPORTED_OPERATION": (-32004, 400), "VERSION_NOT_SUPPORTED": (-32009, 400),
           "INVALID_PARAMS": (-32602, 400), "INVALID_REQUEST": (-32600, 400),
           "PUSH_NOTIFICATION_NOT_SUPPORTED": (-32003, 400)}


class WireError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Wire:
    """One binding's calls over raw HTTP; results are the 1.0 JSON objects either way."""

    def __init__(self, http: httpx.AsyncClient, url: str, version: str = "1.0") -> None:
        self.http, self.url, self.version = http, url, version

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def stream(self, method: str, params: dict[str, Any], last_event_id: int | None = None
               ) -> Any:
        raise NotImplementedError

    async def events(self, method: str, params: dict[str, Any], *, last_event_id: int | None
                     = None, limit: int | None = None) -> list[tuple[int | None, dict[str, Any]]]:
        out: list[tuple[int | None, dict[str, Any]]] = []
        async with self.stream(method, params, last_event_id) as events:
            async for item in events:
                out.append(item)
                if limit is not None and len(out) >= limit:
                    break
        return out


class JsonRpcWire(Wire):
    def _headers(self) -> dict[str, str]:
        return {"A2A-Version": self.version}

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        r = await self.http.post(self.url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                 "params": params}, headers=self._headers())
        assert r.status_code == 200, r.text
        body = r.json()
        if "error" in body:
            raise WireError(body["error"]["code"])
        return body["result"]

    @asynccontextmanager
    async def stream(self, method: str, params: dict[str, Any],
                     last_event_id: int | None = None) -> AsyncIterator[Any]:
        headers = self._headers()
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        async with self.http.stream("POST", self.url, json=body, headers=headers) as r:
            if not r.headers["content-type"].startswith("text/event-stream"):
                await r.aread()
                raise WireError(r.json()["error"]["code"])

            async def results() -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
                async for event_id, frame in sse_events(r):
                    if "error" in frame:
                        raise WireError(frame["error"]["code"])
                    yield event_id, frame["result"]

            yield results()


class RestWire(Wire):
    def _headers(self) -> dict[str, str]:
        return {"A2A-Version": self.version}

    def _route(self, method: str, p: dict[str, Any]) -> tuple[str, str, Any, Any]:
        p = dict(p)
        if method in ("SendMessage", "SendStreamingMessage"):
            path = "message:send" if method == "SendMessage" else "message:stream"
            return "POST", path, None, p
        if method == "GetTask":
            return "GET", f"tasks/{p.pop('id')}", p, None
        if method == "ListTasks":
            return "GET", "tasks", p, None
        if method == "CancelTask":
            return "POST", f"tasks/{p.pop('id')}:cancel", None, p
        if method == "SubscribeToTask":
            return "GET", f"tasks/{p.pop('id')}:subscribe", None, None
        task = p.pop("taskId")
        if method == "CreateTaskPushNotificationConfig":
            return "POST", f"tasks/{task}/pushNotificationConfigs", None, p
        if method == "ListTaskPushNotificationConfigs":
            return "GET", f"tasks/{task}/pushNotificationConfigs", p, None
        verb = "GET" if method == "GetTaskPushNotificationConfig" else "DELETE"
        return verb, f"tasks/{task}/pushNotificationConfigs/{p.pop('id')}", None, None

    @staticmethod
    def _raise(status: int, body: dict[str, Any]) -> None:
        err = body["error"]
        reason = err["details"][0]["reason"]
        code, http_status = REASONS[reason]
        assert (status, err["code"]) == (http_status, http_status), body
        raise WireError(code)

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        verb, path, query, body = self._route(method, params)
        query = {k: str(v).lower() if isinstance(v, bool) else v
                 for k, v in (query or {}).items()}
        r = await self.http.request(verb, self.url + path, params=query or None, json=body,
                                    headers=self._headers())
        if r.status_code != 200:
            self._raise(r.status_code, r.json())
        result = r.json()
        return None if method == "DeleteTaskPushNotificationConfig" and result == {} else result

    @asynccontextmanager
    async def stream(self, method: str, params: dict[str, Any],
                     last_event_id: int | None = None) -> AsyncIterator[Any]:
        verb, path, _, body = self._route(method, params)
        headers = self._headers()
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        async with self.http.stream(verb, self.url + path, json=body, headers=headers) as r:
            if r.status_code != 200:
                await r.aread()
                self._raise(r.status_code, r.json())
            assert r.headers["content-type"].startswith("text/event-stream")

            async def results() -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
                async for event_id, data in sse_events(r):
                    assert "jsonrpc" not in data  # REST: the bare StreamResponse
                    yield event_id, data

            yield results()


# --- agents -------------------------------------------------------------------------------


async def slow_agent(ctx: RunContext) -> str:
    """Works in 40 ticks, each an artifact chunk (a task to cancel or subscribe to): of 50 ms,
    or of N ms for ``tick N`` (a scenario that waits for the end asks for shorter ones)."""
    words = ctx.text.split()
    tick = int(words[1]) / 1000 if len(words) > 1 else 0.05
    for i in range(40):
        await anyio.sleep(tick)
        await ctx.artifact(f"t{i} ", name="ticks", append=i > 0, last_chunk=i == 39)
    return "slow done"


async def agent(ctx: RunContext) -> str | None:
    return await (slow_agent(ctx) if ctx.text.startswith("tick") else demo_agent(ctx))


# --- scenarios ----------------------------------------------------------------------------


def send(text: str, **extra: Any) -> dict[str, Any]:
    return {"message": text_message(text, **extra.pop("message_extra", {})), **extra}


_ERROR_ID = re.compile(r"error id [0-9a-f]+")


def _text(part: dict[str, Any]) -> str | None:
    text = part.get("text")
    return None if text is None else _ERROR_ID.sub("error id <id>", text)


def shape(task: dict[str, Any]) -> dict[str, Any]:
    """A task without its ids, timestamps and error ids (they differ from run to run)."""
    return {
        "state": task["status"]["state"],
        "status_text": [_text(p) for p in (task["status"].get("message") or {})
                        .get("parts", [])],
        "history": [(m["role"], [_text(p) for p in m["parts"]])
                    for m in task.get("history") or []],
        "artifacts": [(a.get("name"), "".join(p.get("text", "") for p in a["parts"]))
                      for a in task.get("artifacts") or []],
    }


async def wait_state(w: Wire, task_id: str, *states: str) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            task = await w.call("GetTask", {"id": task_id})
            if task["status"]["state"] in states:
                return task
            await anyio.sleep(0.02)


async def sc_send_blocking(w: Wire, push: str) -> Any:
    result = await w.call("SendMessage", send("hello there"))
    return shape(result["task"])


async def sc_send_return_immediately(w: Wire, push: str) -> Any:
    # Short ticks: this waits for the end, and nothing here depends on how long the run takes.
    result = await w.call("SendMessage", send("tick 5",
                                              configuration={"returnImmediately": True}))
    first = result["task"]["status"]["state"]
    assert first in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    done = await wait_state(w, result["task"]["id"], "TASK_STATE_COMPLETED")
    return shape(done)


async def sc_stream(w: Wire, push: str) -> Any:
    events = await w.events("SendStreamingMessage", send("a b c"))
    ids = [i for i, _ in events]
    assert ids == sorted(ids)
    kinds = [next(iter(e)) for _, e in events]
    assert kinds[0] == "task"
    last = events[-1][1]["statusUpdate"]["status"]["state"]
    return kinds, last


async def sc_get_history_length(w: Wire, push: str) -> Any:
    task = (await w.call("SendMessage", send("one two")))["task"]
    full = await w.call("GetTask", {"id": task["id"]})
    newest = await w.call("GetTask", {"id": task["id"], "historyLength": 1})
    none = await w.call("GetTask", {"id": task["id"], "historyLength": 0})
    assert len(newest["history"]) == 1 and "history" not in none
    return shape(full), shape(newest), shape(none)


async def sc_list_filters_and_paging(w: Wire, push: str) -> Any:
    ctx = uuid.uuid4().hex
    for i in range(3):
        await w.call("SendMessage", send(f"m{i}", message_extra={"contextId": ctx}))
    await w.call("SendMessage", send("fail", message_extra={"contextId": ctx}))
    await w.call("SendMessage", send("other"))
    page1 = await w.call("ListTasks", {"contextId": ctx, "pageSize": 2})
    assert page1["nextPageToken"]
    page2 = await w.call("ListTasks", {"contextId": ctx, "pageSize": 2,
                                       "pageToken": page1["nextPageToken"]})
    completed = await w.call("ListTasks", {"contextId": ctx, "status": "TASK_STATE_COMPLETED",
                                           "includeArtifacts": True, "historyLength": 1})
    bare = await w.call("ListTasks", {"contextId": ctx, "status": "TASK_STATE_FAILED"})
    assert all("artifacts" not in t for t in bare["tasks"])
    assert all(len(t["history"]) == 1 for t in completed["tasks"])
    return ([shape(t) for t in page1["tasks"] + page2["tasks"]], page2["nextPageToken"],
            page1["totalSize"], [shape(t) for t in completed["tasks"]],
            [shape(t) for t in bare["tasks"]])


async def sc_cancel(w: Wire, push: str) -> Any:
    task = (await w.call("SendMessage", send("tick",
                                            configuration={"returnImmediately": True})))["task"]
    canceled = await w.call("CancelTask", {"id": task["id"]})
    assert canceled["id"] == task["id"]
    try:
        await w.call("CancelTask", {"id": task["id"]})
    except WireError as exc:
        again = exc.code
    return canceled["status"]["state"], again


async def sc_subscribe_and_resume(w: Wire, push: str) -> Any:
    task = (await w.call("SendMessage", send("tick",
                                            configuration={"returnImmediately": True})))["task"]
    first = await w.events("SubscribeToTask", {"id": task["id"]}, limit=3)
    assert next(iter(first[0][1])) == "task"
    last_id = first[-1][0]
    assert last_id is not None
    rest = await w.events("SubscribeToTask", {"id": task["id"]}, last_event_id=last_id)
    ids = [i for i, _ in rest]
    assert ids and all(i is not None and i > last_id for i in ids)
    assert ids == sorted(ids)
    assert "task" not in rest[0][1]  # resumed: no snapshot, the next event after last_id
    # The chunks made before the subscription are in its snapshot (on a loaded machine the
    # first may come several ticks after the send); each other one comes once, in order.
    before = "".join(part.get("text", "") for artifact in first[0][1]["task"].get("artifacts") or []
                     for part in artifact["parts"])
    ticks = [e["artifactUpdate"]["artifact"]["parts"][0]["text"]
             for _, e in first[1:] + rest if "artifactUpdate" in e]
    final = rest[-1][1]["statusUpdate"]["status"]["state"]
    try:
        await w.events("SubscribeToTask", {"id": task["id"]})
    except WireError as exc:
        ended = exc.code
    seen, whole = before + "".join(ticks), "".join(f"t{i} " for i in range(40))
    assert seen == whole, f"chunks seen across the resume: {seen[:400]!r}"
    return seen == whole, final, ended


async def sc_push_crud(w: Wire, push: str) -> Any:
    task = (await w.call("SendMessage", send("ask")))["task"]
    created = await w.call("CreateTaskPushNotificationConfig",
                           {"taskId": task["id"], "id": "c1", "url": push, "token": "t"})
    got = await w.call("GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"})
    listed = await w.call("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    # The follow-up completes the task: a state change the config is delivered.
    await w.call("SendMessage", send("x", message_extra={"taskId": task["id"]}))
    await eventually(lambda: any(task["id"] in r.body.decode() for r in RECEIVER.accepted()))
    deleted = await w.call("DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"})
    after = await w.call("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    try:
        await w.call("GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "c1"})
    except WireError as exc:
        gone = exc.code
    try:
        await w.call("CreateTaskPushNotificationConfig",
                     {"taskId": "no-such-task", "id": "c1", "url": push})
    except WireError as exc:
        unknown = exc.code
    for c in (created, got):
        assert c["taskId"] == task["id"]
        c.pop("taskId")
    for c in listed["configs"]:
        c.pop("taskId")
    return created, got, listed, deleted, after, gone, unknown


async def sc_input_required_follow_up(w: Wire, push: str) -> Any:
    task = (await w.call("SendMessage", send("ask")))["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    follow = await w.call("SendMessage", send("the answer", message_extra={
        "taskId": task["id"], "contextId": task["contextId"]}))
    assert follow["task"]["id"] == task["id"]
    return shape(task), shape(follow["task"])


async def sc_errors(w: Wire, push: str) -> Any:
    codes: list[int] = []

    async def code_of(call: Awaitable[Any]) -> None:
        try:
            await call
        except WireError as exc:
            codes.append(exc.code)
        else:
            codes.append(0)

    await code_of(w.call("GetTask", {"id": "no-such-task"}))
    await code_of(w.call("CancelTask", {"id": "no-such-task"}))
    done = (await w.call("SendMessage", send("hi")))["task"]
    await code_of(w.call("GetTask", {"id": done["id"], "historyLength": -1}))
    await code_of(w.call("ListTasks", {"pageSize": 1000}))
    await code_of(w.call("SendMessage", {"message": {"role": "ROLE_USER"}}))
    await code_of(w.call("CancelTask", {"id": done["id"]}))
    await code_of(w.call("SendMessage", send("more", message_extra={"taskId": done["id"]})))
    w.version = "9.9"
    await code_of(w.call("GetTask", {"id": done["id"]}))
    return codes


SCENARIOS: list[Callable[[Wire, str], Awaitable[Any]]] = [
    sc_send_blocking, sc_send_return_immediately, sc_stream, sc_get_history_length,
    sc_list_filters_and_paging, sc_cancel, sc_subscribe_and_resume, sc_push_crud,
    sc_input_required_follow_up, sc_errors,
]
RECEIVER = Receiver()
"""The webhook receiver (one per test process: scenarios find deliveries by task id)."""
EXPECTED_ERRORS = [-32001, -32001, -32602, -32602, -32602, -32002, -32004, -32009]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__[3:] for s in SCENARIOS])
async def test_same_outcome_over_both_bindings(
    scenario: Callable[[Wire, str], Awaitable[Any]]
) -> None:
    outcomes = {}
    async with receiving(RECEIVER) as hook:
        for name, wire in (("jsonrpc", JsonRpcWire), ("rest", RestWire)):
            app = A2AApp(agent, grace=1.0, push=PushSettings(allow_hosts=("127.0.0.1",)))
            async with served(app) as url, httpx.AsyncClient(timeout=20) as http:
                outcomes[name] = await scenario(wire(http, url), hook)
    assert outcomes["jsonrpc"] == outcomes["rest"]
    if scenario is sc_errors:
        assert outcomes["rest"] == EXPECTED_ERRORS
