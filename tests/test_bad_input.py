"""Bad input over real HTTP: each gets its clear error, never a 500, and disturbs no other task.

The main test keeps three witness tasks alive around a barrage of bad requests: a completed task
(its stored form must not change), a task waiting for input (it must still take its answer), and
an interactive stream running while the barrage goes on (it must still complete). No bad request
may create a task, and the server must log no error.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.protocol.types import Task
from scoped_a2a.store.memory import MemoryTaskStore

from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio

ID = "req-7"
DEEP = 100_000
_UNSET: Any = object()


def call(method: Any = _UNSET, params: Any = _UNSET, *, id: Any = ID, **env: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": id}
    if method is not _UNSET:
        body["method"] = method
    if params is not _UNSET:
        body["params"] = params
    body.update(env)
    if id is _UNSET:
        del body["id"]
    return body


@dataclass
class Case:
    name: str
    body: Any  # a JSON-able object, or bytes sent as they are
    code: int
    says: tuple[str, ...] = ()  # substrings the error message must contain
    id: Any = ID  # the id the answer must carry
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200
    v1: bool = True  # 1.0 errors carry google.rpc.ErrorInfo in error.data


def v03_msg(text: str = "x", **extra: Any) -> dict[str, Any]:
    return text_message(text, v1=False, **extra)


def v03_parts(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"message": v03_msg() | {"parts": list(parts)}}


def v10_parts(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"message": text_message("x") | {"parts": list(parts)}}


def jsonrpc_cases(done: str) -> list[Case]:
    """Every bad request answered with a JSON-RPC error; ``done`` is a completed task's id."""
    missing = "Object missing required field"
    cases = [
        # --- the body is not a JSON-RPC request -------------------------------------------
        Case("truncated JSON", b'{"jsonrpc": "2.0", "id": 1, ', -32700, ("not valid JSON",),
             id=None),
        Case("empty body", b"", -32700, ("not valid JSON",), id=None),
        Case("not UTF-8", b"\xff\xfe{}", -32700, ("not valid JSON",), id=None),
        # msgspec gives up on deep nesting with RecursionError (depth ~1000 on 3.11, more on 3.13)
        Case("nested too deeply", b"[" * DEEP + b"]" * DEEP, -32700, ("too deeply",), id=None),
        Case("params nested too deeply",
             b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x", "d": '
             + b"[" * DEEP + b"]" * DEEP + b"}}", -32700, ("too deeply",), id=None),
        Case("batch", [call("GetTask", {"id": done})], -32600, ("batch",), id=None),
        Case("empty batch", [], -32600, ("batch",), id=None),
        Case("number", 42, -32600, ("JSON-RPC request object",), id=None),
        Case("string", "GetTask", -32600, ("JSON-RPC request object",), id=None),
        Case("null", None, -32600, ("JSON-RPC request object",), id=None),
        # --- wrong envelope -----------------------------------------------------------------
        Case("jsonrpc 1.0", call("GetTask", {"id": done}, jsonrpc="1.0"), -32600,
             ('"jsonrpc" must be "2.0"',)),
        Case("no jsonrpc", {"id": ID, "method": "GetTask", "params": {"id": done}}, -32600,
             (missing, "`jsonrpc`")),
        Case("no method", call(params={"id": done}), -32600, (missing, "`method`")),
        Case("method not a string", call(5), -32600, ("`$.method`",)),
        Case("no id", call("GetTask", {"id": done}, id=_UNSET), -32600, ('"id"',), id=None),
        Case("null id", call("GetTask", {"id": done}, id=None), -32600, ('"id"',), id=None),
        Case("bool id", call("GetTask", {"id": done}, id=True), -32600, ("`$.id`",), id=None),
        Case("number id is echoed", call("NoSuchMethod", id=12), -32601, id=12),
        # A2A has no notifications: without an id, the specific error still comes first.
        Case("no id, unknown method", call("NoSuchMethod", {}, id=_UNSET), -32601,
             ("'NoSuchMethod'",), id=None),
        Case("no id, bad params", call("GetTask", {"id": 5}, id=_UNSET), -32602, ("$.id",),
             id=None),
        Case("null id, bad 0.3 params", call("tasks/get", {"id": 5}, id=None), -32602,
             ("$.id",), id=None, v1=False),
        Case("no id, ListTasks pageSize a string", call("ListTasks", {"pageSize": "x"}, id=_UNSET),
             -32602, ("$.pageSize",), id=None),
        # --- unknown method -----------------------------------------------------------------
        Case("unknown method", call("NoSuchMethod", {}), -32601, ("'NoSuchMethod'",)),
        Case("unknown 0.3-style method", call("tasks/nosuch", {}), -32601, ("'tasks/nosuch'",)),
        # --- unsupported version ------------------------------------------------------------
        Case("A2A-Version 2.0", call("GetTask", {"id": done}), -32009, ("'2.0'", "1.0"),
             headers={"A2A-Version": "2.0"}),
        Case("A2A-Version 0.2 on a 0.3 method", call("tasks/get", {"id": done}), -32009,
             ("'0.2'",), headers={"A2A-Version": "0.2"}, v1=False),
        # --- invalid params: SendMessage and friends ---------------------------------------
        Case("SendMessage part with two contents",
             call("SendMessage", v10_parts({"text": "a", "url": "https://x/y"})), -32602,
             ("exactly one of text, raw, url, data", "$.message.parts[0]")),
        Case("SendMessage empty part", call("SendMessage", v10_parts({})), -32602,
             ("exactly one of",)),
        Case("SendMessage no parts", call("SendMessage", v10_parts()), -32602, ("no parts",)),
        Case("SendMessage bad base64", call("SendMessage", v10_parts({"raw": "!!"})), -32602,
             ("base64", "$.message.parts[0].raw")),
        Case("SendMessage unknown role",
             call("SendMessage", {"message": text_message("x") | {"role": "ROLE_BOSS"}}),
             -32602, ("ROLE_BOSS", "$.message.role", "one of ROLE_USER, ROLE_AGENT")),
        Case("SendMessage 0.3 role name on 1.0",
             call("SendMessage", {"message": text_message("x") | {"role": "user"}}),
             -32602, ("'user'", "one of ROLE_USER, ROLE_AGENT")),
        Case("SendMessage messageId a number",
             call("SendMessage", {"message": text_message("x") | {"messageId": 5}}), -32602,
             ("$.message.messageId",)),
        Case("SendMessage historyLength a string",
             call("SendMessage", {"message": text_message("x"),
                                  "configuration": {"historyLength": "all"}}),
             -32602, ("$.configuration.historyLength",)),
        Case("SendMessage negative historyLength",
             call("SendMessage", {"message": text_message("x"),
                                  "configuration": {"historyLength": -1}}),
             -32602, ("historyLength",)),
        Case("SendMessage message without messageId",
             call("SendMessage", {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}),
             -32602, (missing, "`messageId`")),
        Case("SendMessage push config on a loopback address", call("SendMessage", {
            "message": text_message("x"),
            "configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/"}}}),
            -32602, ("127.0.0.1 is a loopback address", "--allow-webhook-host")),
        Case("message/send push config not http", call("message/send", {
            "message": v03_msg(),
            "configuration": {"pushNotificationConfig": {"url": "ftp://example.com/"}}}),
            -32602, ("http or https",), v1=False),
        Case("GetTask id a number", call("GetTask", {"id": 5}), -32602, ("$.id",)),
        Case("GetTask negative historyLength", call("GetTask", {"id": done, "historyLength": -2}),
             -32602, ("historyLength",)),
        Case("ListTasks pageSize a string", call("ListTasks", {"pageSize": "ten"}), -32602,
             ("$.pageSize",)),
        Case("ListTasks pageSize too big", call("ListTasks", {"pageSize": 1000}), -32602,
             ("pageSize must be between 1 and 100",)),
        Case("ListTasks pageSize 0", call("ListTasks", {"pageSize": 0}), -32602,
             ("pageSize must be between 1 and 100",)),
        Case("ListTasks pageSize -1", call("ListTasks", {"pageSize": -1}), -32602,
             ("pageSize must be between 1 and 100",)),
        Case("ListTasks statusTimestampAfter -1",
             call("ListTasks", {"statusTimestampAfter": "-1"}), -32602,
             ("statusTimestampAfter", "RFC 3339")),
        Case("ListTasks statusTimestampAfter not a date",
             call("ListTasks", {"statusTimestampAfter": "not-a-date"}), -32602,
             ("statusTimestampAfter",)),
        Case("ListTasks negative historyLength", call("ListTasks", {"historyLength": -1}),
             -32602, ("historyLength",)),
        Case("ListTasks negative historyLength, no match",
             call("ListTasks", {"historyLength": -1, "contextId": "no-such-context"}),
             -32602, ("historyLength",)),
        Case("ListTasks unknown status", call("ListTasks", {"status": "BOGUS"}), -32602,
             ("BOGUS", "$.status", "one of TASK_STATE_SUBMITTED, TASK_STATE_WORKING, "
              "TASK_STATE_COMPLETED")),
        Case("ListTasks 0.3 state name on 1.0", call("ListTasks", {"status": "completed"}),
             -32602, ("'completed'", "TASK_STATE_COMPLETED")),
        Case("ListTasks foreign pageToken", call("ListTasks", {"pageToken": "zz"}), -32602,
             ("pageToken",)),
        # --- invalid params: 0.3 ------------------------------------------------------------
        Case("0.3 unknown role", call("message/send", {"message": v03_msg(role="boss")}), -32602,
             ("role must be 'user' or 'agent'", "$.message"), v1=False),
        Case("0.3 text part without text", call("message/send", v03_parts({"kind": "text"})),
             -32602, (missing, "`text`", "$.message.parts[0]"), v1=False),
        Case("0.3 unknown part kind",
             call("message/send", v03_parts({"kind": "image", "text": "x"})), -32602,
             ("'image'", "$.message.parts[0].kind"), v1=False),
        Case("0.3 file without bytes or uri",
             call("message/send", v03_parts({"kind": "file", "file": {"name": "a"}})), -32602,
             ("exactly one of 'bytes' or 'uri'", "$.message.parts[0].file"), v1=False),
        Case("0.3 file with bad base64",
             call("message/send", v03_parts({"kind": "file", "file": {"bytes": "!!"}})), -32602,
             ("base64", "$.message.parts[0].file.bytes"), v1=False),
        Case("0.3 data part not an object",
             call("message/send", v03_parts({"kind": "data", "data": [1, 2]})), -32602,
             ("$.message.parts[0].data",), v1=False),
        Case("0.3 message of kind task",
             call("message/send", {"message": v03_msg(kind="task")}), -32602,
             ("kind must be 'message'",), v1=False),
        Case("0.3 blocking a string", call("message/send", {
            "message": v03_msg(), "configuration": {"blocking": "yes"}}), -32602,
            ("$.configuration.blocking",), v1=False),
        # --- the answer is an error about a task ------------------------------------------
        Case("SendMessage to an unknown task",
             call("SendMessage", {"message": text_message("x", taskId="no-such-task")}), -32001,
             ("'no-such-task'",)),
        Case("SendStreamingMessage to an unknown task",
             call("SendStreamingMessage",
                  {"message": text_message("x", taskId="no-such-task")}), -32001,
             ("'no-such-task'",)),
        Case("message/send to an unknown task",
             call("message/send", {"message": v03_msg(taskId="no-such-task")}), -32001,
             ("'no-such-task'",), v1=False),
        Case("SendMessage to a completed task",
             call("SendMessage", {"message": text_message("x", taskId=done)}), -32004,
             ("completed", "terminal")),
        Case("SendStreamingMessage to a completed task",
             call("SendStreamingMessage", {"message": text_message("x", taskId=done)}), -32004,
             ("completed",)),
        Case("message/send to a completed task",
             call("message/send", {"message": v03_msg(taskId=done)}), -32004, ("completed",),
             v1=False),
        Case("CancelTask of a completed task", call("CancelTask", {"id": done}), -32002,
             ("completed", "cannot be canceled")),
        Case("tasks/cancel of a completed task", call("tasks/cancel", {"id": done}), -32002,
             ("completed",), v1=False),
        Case("SubscribeToTask to a completed task", call("SubscribeToTask", {"id": done}), -32004,
             ("completed", "GetTask")),
        Case("tasks/resubscribe to a completed task", call("tasks/resubscribe", {"id": done}),
             -32004, ("completed",), v1=False),
        # --- push notifications and the extended card --------------------------------------
        Case("GetExtendedAgentCard unconfigured", call("GetExtendedAgentCard", {}), -32007,
             ("extended agent card",)),
        Case("agent/getAuthenticatedExtendedCard unconfigured",
             call("agent/getAuthenticatedExtendedCard", {}), -32007, v1=False),
    ]
    # Every method, with params absent, empty, or of the wrong type.
    required = {
        "SendMessage": "message", "SendStreamingMessage": "message", "GetTask": "id",
        "CancelTask": "id", "SubscribeToTask": "id", "message/send": "message",
        "message/stream": "message", "tasks/get": "id", "tasks/cancel": "id",
        "tasks/resubscribe": "id",
    }
    for method, name in required.items():
        v1 = "/" not in method
        cases += [
            Case(f"{method} without params", call(method), -32602, ("needs params",), v1=v1),
            Case(f"{method} with {{}}", call(method, {}), -32602, (missing, f"`{name}`"),
                 v1=v1),
            Case(f"{method} with a list", call(method, [name]), -32602,
                 ("Expected `object`, got `array`",), v1=v1),
            Case(f"{method} with a string", call(method, name), -32602,
                 ("Expected `object`, got `str`",), v1=v1),
        ]
    cases.append(Case("ListTasks with a list", call("ListTasks", []), -32602, ("`object`",)))
    # Unknown task ids, every method that takes one.
    for method in ("GetTask", "CancelTask", "SubscribeToTask",
                   "tasks/get", "tasks/cancel", "tasks/resubscribe"):
        cases.append(Case(f"{method} of an unknown task", call(method, {"id": "no-such-task"}),
                          -32001, ("'no-such-task'", "not found"), v1="/" not in method))
    # Push configs (push is on by default; tests/test_push*.py cover it switched off).
    cases += [
        Case("CreateTaskPushNotificationConfig without url",
             call("CreateTaskPushNotificationConfig", {"taskId": done, "id": done}), -32602,
             (missing, "`url`")),
        Case("CreateTaskPushNotificationConfig of an unknown task",
             call("CreateTaskPushNotificationConfig",
                  {"taskId": "no-such-task", "url": "https://example.com/"}), -32001),
        Case("GetTaskPushNotificationConfig of an unknown config",
             call("GetTaskPushNotificationConfig", {"taskId": done, "id": "nope"}), -32001,
             ("no push notification config 'nope'",)),
        Case("DeleteTaskPushNotificationConfig without id",
             call("DeleteTaskPushNotificationConfig", {"taskId": done}), -32602, ("id",)),
        Case("tasks/pushNotificationConfig/set without a config",
             call("tasks/pushNotificationConfig/set", {"taskId": done}), -32602,
             (missing, "`pushNotificationConfig`"), v1=False),
        Case("tasks/pushNotificationConfig/get of an unknown task",
             call("tasks/pushNotificationConfig/get", {"id": "no-such-task"}), -32001,
             v1=False),
        Case("tasks/pushNotificationConfig/list with a list",
             call("tasks/pushNotificationConfig/list", [done]), -32602, ("`object`",),
             v1=False),
        Case("tasks/pushNotificationConfig/delete without a config id",
             call("tasks/pushNotificationConfig/delete", {"id": done}), -32602,
             (missing, "`pushNotificationConfigId`"), v1=False),
    ]
    return cases


async def post(client: httpx.AsyncClient, url: str, body: Any,
               headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(url, content=content,
                             headers={"content-type": "application/json", **(headers or {})})


def check_error(case: Case, response: httpx.Response) -> None:
    where = f"case {case.name!r}: {response.status_code} {response.text[:300]}"
    assert response.status_code == case.status, where
    assert response.headers["content-type"] == "application/json", where
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"}, where
    assert body["jsonrpc"] == "2.0" and body["id"] == case.id, where
    error = body["error"]
    assert error["code"] == case.code, where
    for text in case.says:
        assert text in error["message"], where
    if case.v1:
        [info] = error["data"]
        assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo", where
        assert info["domain"] == "a2a-protocol.org" and info["reason"].isupper(), where
    else:
        assert "data" not in error, where


async def settled(app: A2AApp) -> None:
    """Wait (boundedly) until no run and no request is left: a request's own bookkeeping ends
    a moment after its client has the answer."""
    with anyio.fail_after(5):
        while app.runner.active or app.open_requests:
            await anyio.sleep(0.01)


def no_error_logs(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


async def test_bad_requests_get_clear_errors_and_disturb_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    app = A2AApp(demo_agent, grace=1.0)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        # Witnesses: a completed task, one waiting for input, one interactive stream running.
        done = (await rpc(client, url, "SendMessage",
                          {"message": text_message("keep me")}))["result"]["task"]
        asked = (await rpc(client, url, "SendMessage",
                           {"message": text_message("ask")}))["result"]["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        stream_events: list[dict[str, Any]] = []
        streaming = anyio.Event()

        async def stream_slow_run() -> None:
            req = call("SendStreamingMessage", {"message": text_message("slow 2")})
            async with client.stream("POST", url, json=req,
                                     headers={"A2A-Version": "1.0"}) as resp:
                async for _, event in sse_events(resp):
                    stream_events.append(event["result"])
                    streaming.set()

        cases = jsonrpc_cases(done["id"])
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream_slow_run)
                await streaming.wait()
                running = stream_events[0]["task"]["id"]
                # First, while the slow run surely still works (it has seconds to go).
                cases[:0] = [
                    Case("SendMessage to a working task",
                         call("SendMessage", {"message": text_message("x", taskId=running)}),
                         -32004, ("is working",)),
                ]
                cases += [
                    Case("an answer from another context",
                         call("SendMessage", {"message": text_message(
                             "x", taskId=asked["id"], contextId="another-context")}),
                         -32602, ("another contextId",)),
                ]
                for case in cases:
                    check_error(case, await post(client, url, case.body, case.headers))
                # The version also comes as a query parameter.
                check_error(Case("query A2A-Version", None, -32009, ("'2.0'",)), await post(
                    client, url + "?A2A-Version=2.0", call("GetTask", {"id": done["id"]})))
                # Refused at the HTTP level (JSON-RPC answers make no sense there).
                for ctype in ("text/plain", "application/x-www-form-urlencoded", ""):
                    response = await client.post(
                        url, content=json.dumps(call("GetTask", {"id": done["id"]})),
                        headers={"content-type": ctype})
                    check_error(Case(f"content type {ctype!r}", None, -32600,
                                     ("Content-Type must be application/json",), id=None,
                                     status=415), response)
                response = await client.get(url)
                assert response.status_code == 405, response.text
                assert "POST" in response.json()["error"]
                response = await client.post(url + "rpc", json=call("GetTask", {"id": "x"}))
                assert response.status_code == 404, response.text
                assert "'/rpc'" in response.json()["error"]["message"]
                response = await client.post(url + ".well-known/agent-card.json", json={})
                assert response.status_code == 405, response.text
            # (the task group waited for the stream to end)

        # The stream ran to completion through all of it.
        assert stream_events[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        final = stream_events[-1]["statusUpdate"]["status"]
        assert final["state"] == "TASK_STATE_COMPLETED"
        assert final["message"]["parts"][0]["text"] == "done after 2s"
        # The completed task is exactly as it was.
        got = await rpc(client, url, "GetTask", {"id": done["id"]})
        assert got["result"] == done
        # The task waiting for input still takes its answer.
        answer = text_message("still here", taskId=asked["id"])
        answered = (await rpc(client, url, "SendMessage", {"message": answer}))["result"]["task"]
        assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
        assert answered["status"]["message"]["parts"][0]["text"] == "You said: still here"
        # No bad request created a task; nothing is left running or open.
        listed = (await rpc(client, url, "ListTasks", {}))["result"]
        assert listed["totalSize"] == 3
        await settled(app)
    assert len(cases) > 100
    no_error_logs(caplog)


async def test_body_over_the_limit_is_413(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    app = A2AApp(demo_agent, grace=1.0, max_body_bytes=1024)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        done = (await rpc(client, url, "SendMessage",
                          {"message": text_message("small")}))["result"]["task"]
        request = json.dumps(call("GetTask", {"id": done["id"]})).encode()
        too_big = request[:-1] + b" " * 20_000 + b"}"  # valid JSON, 20 KB
        just_fits = request[:-1] + b" " * (1024 - len(request)) + b"}"
        assert len(just_fits) == 1024

        async def chunked(body: bytes) -> Any:
            for i in range(0, len(body), 1000):
                yield body[i : i + 1000]

        over = Case("body over the limit", None, -32600, ("exceeds 1024 bytes",), id=None,
                    status=413)
        # Declared with Content-Length: refused before reading.
        check_error(over, await post(client, url, too_big))
        # Chunked, no length declared: refused once the limit is crossed while reading.
        response = await client.post(url, content=chunked(too_big),
                                     headers={"content-type": "application/json"})
        assert "content-length" not in response.request.headers
        check_error(over, response)
        # A large chunked body of the wrong type still gets its 415 (the body is drained).
        response = await client.post(url, content=chunked(too_big),
                                     headers={"content-type": "text/plain"})
        assert response.status_code == 415, response.text
        # At the limit, the same request is answered.
        for body in (just_fits, chunked(just_fits)):
            response = await client.post(url, content=body,
                                         headers={"content-type": "application/json"})
            assert response.status_code == 200, response.text
            assert response.json()["result"]["id"] == done["id"]
        got = await rpc(client, url, "GetTask", {"id": done["id"]})
        assert got["result"] == done
        await settled(app)
    no_error_logs(caplog)


async def test_extended_card_when_configured() -> None:
    app = A2AApp(demo_agent, extended_card={"name": "demo (extended)",
                                            "description": "for callers who signed in"})
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        public = (await client.get(url + ".well-known/agent-card.json")).json()
        assert public["capabilities"]["extendedAgentCard"] is True
        assert public["supportsAuthenticatedExtendedCard"] is True
        assert public["name"] != "demo (extended)"
        for method, version in (("GetExtendedAgentCard", "1.0"),
                                ("agent/getAuthenticatedExtendedCard", None)):
            card = (await rpc(client, url, method, {}, version=version))["result"]
            assert card["name"] == "demo (extended)", method
            assert card["description"] == "for callers who signed in"
            assert card["supportedInterfaces"][0]["url"] == url


class _GatedStore(MemoryTaskStore):
    """A memory store whose reads can be held at a gate, to line requests up in one tick."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: anyio.Event | None = None
        self.waiting = 0

    async def get(self, task_id: str) -> tuple[Task, int]:
        if self.gate is not None:
            self.waiting += 1
            await self.gate.wait()
        return await super().get(task_id)


async def test_two_answers_to_one_question(caplog: pytest.LogCaptureFixture) -> None:
    """Two callers answer the same input-required task at the same instant: one answer is
    taken, the other is told the task is working (-32004); nothing fails inside."""
    caplog.set_level(logging.WARNING)
    store = _GatedStore()
    app = A2AApp(demo_agent, grace=1.0, store=store)
    assert app.store is store  # (an empty store once went unused: it is falsy)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        asked = (await rpc(client, url, "SendMessage",
                           {"message": text_message("ask")}))["result"]["task"]
        answers: dict[str, dict[str, Any]] = {}

        async def answer(text: str) -> None:
            message = text_message(text, taskId=asked["id"])
            answers[text] = await rpc(client, url, "SendMessage", {"message": message})

        with anyio.fail_after(10):
            store.gate = gate = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(answer, "first")
                tg.start_soon(answer, "second")
                while store.waiting < 2:  # both requests are about to resume the task
                    await anyio.sleep(0.005)
                store.gate = None
                gate.set()
        taken = [t for t, r in answers.items() if "result" in r]
        refused = [r["error"] for r in answers.values() if "error" in r]
        assert len(taken) == 1 and len(refused) == 1, answers
        assert refused[0]["code"] == -32004 and "working" in refused[0]["message"]
        task = answers[taken[0]]["result"]["task"]
        assert task["status"]["message"]["parts"][0]["text"] == f"You said: {taken[0]}"
        await settled(app)
    no_error_logs(caplog)
