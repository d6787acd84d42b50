"""The HTTP+JSON (REST) binding specifics, over real hypercorn on asyncio and trio: its error
statuses and body, bad input (malformed JSON, wrong content type, huge body, unknown routes),
the card, and ownership: a REST caller that hangs up releases its hold exactly as a JSON-RPC
caller does; shutdown answers REST callers the same way.

What every method does is the same as over JSON-RPC: tests/test_bindings.py proves it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, A2AClient, RunPolicy, serve
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.protocol.errors import TaskNotCancelable, TaskNotFound, VersionNotSupported

from .agents import Probe
from .helpers import served, text_message
from .push_receiver import eventually

pytestmark = pytest.mark.anyio

V1 = {"A2A-Version": "1.0"}


def send_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"message": text_message(text), **extra}


def assert_error(r: httpx.Response, status: int, reason: str, grpc: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"  # spec §11.1 and §11.6
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] == status and err["status"] == grpc and err["message"]
    [info] = err["details"]
    assert info == {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                    "domain": "a2a-protocol.org", "metadata": {}}
    return err


async def wait_state(http: httpx.AsyncClient, url: str, task_id: str, state: str) -> dict:
    with anyio.fail_after(10):
        while True:
            task: dict = (await http.get(f"{url}tasks/{task_id}", headers=V1)).json()
            if task["status"]["state"] == state:
                return task
            await anyio.sleep(0.02)


# --- errors and bad input -----------------------------------------------------------------


async def test_error_statuses_and_body() -> None:
    app = A2AApp(demo_agent, max_body_bytes=4096)
    async with served(app) as url, httpx.AsyncClient(base_url=url, headers=V1) as http:
        assert_error(await http.get("/tasks/nope"), 404, "TASK_NOT_FOUND", "NOT_FOUND")
        assert_error(await http.get("/tasks/nope/pushNotificationConfigs/x"), 404,
                     "TASK_NOT_FOUND", "NOT_FOUND")
        done = (await http.post("/message:send", json=send_body("hi"))).json()["task"]
        assert_error(await http.post(f"/tasks/{done['id']}:cancel"), 400,  # 1.0.1 §5.4
                     "TASK_NOT_CANCELABLE", "FAILED_PRECONDITION")
        assert_error(await http.post(f"/tasks/{done['id']}:subscribe"), 400,
                     "UNSUPPORTED_OPERATION", "FAILED_PRECONDITION")
        assert_error(await http.get(f"/tasks/{done['id']}", params={"historyLength": "x"}),
                     400, "INVALID_PARAMS", "INVALID_ARGUMENT")
        err = assert_error(await http.get("/tasks", params={"status": "completed"}),
                           400, "INVALID_PARAMS", "INVALID_ARGUMENT")
        assert "'completed'" in err["message"], err  # says what is wrong, and what is right:
        assert "one of TASK_STATE_SUBMITTED, " in err["message"], err
        # Version: as on JSON-RPC (and 0.3's REST dialect is not served on these routes).
        for version in ("9.9", "0.3"):
            r = await http.get(f"/tasks/{done['id']}", headers={"A2A-Version": version})
            assert_error(r, 400, "VERSION_NOT_SUPPORTED", "FAILED_PRECONDITION")
        r = await http.get(f"/tasks/{done['id']}", params={"A2A-Version": "9.9"},
                           headers={"A2A-Version": ""})
        assert_error(r, 400, "VERSION_NOT_SUPPORTED", "FAILED_PRECONDITION")
        # Absent: the 1.0 routes are served as 1.0.
        async with httpx.AsyncClient(base_url=url) as bare:
            assert (await bare.get(f"tasks/{done['id']}")).status_code == 200
        # Malformed JSON, a body that is not an object, an empty send.
        for body in (b"{", b"[1]", b"", b'{"message": 3}'):
            r = await http.post("/message:send", content=body,
                                headers={"content-type": "application/json"})
            assert_error(r, 400, "INVALID_PARAMS", "INVALID_ARGUMENT")
        r = await http.post(f"/tasks/{done['id']}/pushNotificationConfigs", content=b"{nope",
                            headers={"content-type": "application/json"})
        assert_error(r, 400, "PARSE_ERROR", "INVALID_ARGUMENT")
        # Wrong or missing content type: 415, with the error body.
        for headers in ({"content-type": "text/plain"}, {}):
            r = await http.post("/message:send", content=b'{"a":1}', headers=headers)
            assert_error(r, 415, "CONTENT_TYPE_NOT_SUPPORTED", "INVALID_ARGUMENT")
        # Huge body: 413 before the method runs, the connection closed.
        huge = {"message": text_message("x" * 10_000)}
        r = await http.post("/message:send", json=huge)
        assert_error(r, 413, "INVALID_REQUEST", "INVALID_ARGUMENT")
        assert r.headers["connection"] == "close"
        # Unknown route, wrong verb.
        assert_error(await http.get("/tasks/a/b/c"), 404, "METHOD_NOT_FOUND", "NOT_FOUND")
        r = await http.delete("/message:send")
        assert_error(r, 405, "METHOD_NOT_FOUND", "NOT_FOUND")
        assert r.headers["allow"] == "POST"
        # No extended card configured.
        assert_error(await http.get("/extendedAgentCard"), 400,
                     "EXTENDED_AGENT_CARD_NOT_CONFIGURED", "FAILED_PRECONDITION")
        # Nothing left behind (the last answer may reach us before its send() returns on
        # trio); JSON-RPC still answers at /.
        await eventually(lambda: app.open_requests == 0)
        r = await http.post("", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                      "params": {"id": done["id"]}})
        assert r.json()["result"]["id"] == done["id"]


async def test_query_names_delete_answer_and_extended_card() -> None:
    app = A2AApp(demo_agent, extended_card={"description": "the extended card"})
    async with served(app) as url, httpx.AsyncClient(base_url=url, headers=V1) as http:
        # The spec's other media type is accepted on requests, and answered with (1.0.1 §11.1;
        # tests/test_rest_media_type.py).
        r = await http.post("/message:send", content=json.dumps(send_body("hi")),
                            headers={"content-type": "application/a2a+json"})
        assert r.headers["content-type"] == "application/a2a+json"
        done = r.json()["task"]
        # Proto field names work in the query too; unknown parameters are ignored.
        r = await http.get(f"/tasks/{done['id']}", params={"history_length": 1, "x": "y"})
        assert [m["role"] for m in r.json()["history"]] == ["ROLE_AGENT"]
        listed = (await http.get("/tasks", params={"include_artifacts": "true"})).json()
        assert listed["tasks"][0]["artifacts"]
        assert (await http.delete(f"/tasks/{done['id']}/pushNotificationConfigs/x")).json() == {}
        card = (await http.get("/extendedAgentCard")).json()
        assert card["description"] == "the extended card"


async def test_card_lists_both_bindings_in_the_preferred_order() -> None:
    for preferred, order in (("JSONRPC", ["JSONRPC", "HTTP+JSON", "JSONRPC"]),
                             ("HTTP+JSON", ["HTTP+JSON", "JSONRPC", "JSONRPC"])):
        app = A2AApp(demo_agent, preferred_binding=preferred)
        async with served(app) as url, httpx.AsyncClient() as http:
            card = (await http.get(url + ".well-known/agent-card.json")).json()
            ifaces = card["supportedInterfaces"]
            assert [i["protocolBinding"] for i in ifaces] == order
            assert [i["protocolVersion"] for i in ifaces] == (
                ["1.0", "1.0", "0.3"])
            assert {i["url"] for i in ifaces} == {url, url.rstrip("/")}  # REST: no "/"
            assert card["preferredTransport"] == "JSONRPC"  # 0.3 clients: JSON-RPC only
            async with A2AClient(url, http=http) as client:
                picked = await client.binding()
            assert picked == ("rest" if preferred == "HTTP+JSON" else "jsonrpc")
    with pytest.raises(ValueError):
        A2AApp(demo_agent, preferred_binding="GRPC")


# --- ownership ----------------------------------------------------------------------------


async def hang_up_once_working(http: httpx.AsyncClient, url: str, probe: Probe, path: str,
                               body: dict, *, stream: bool) -> float:
    """Start a REST call, drop the connection once the run works; return the hang-up time."""

    async def call() -> None:
        if stream:
            async with http.stream("POST", url + path, json=body, headers=V1) as r:
                async for _ in r.aiter_bytes():
                    pass
        else:
            await http.post(url + path, json=body, headers=V1)
        raise AssertionError("the call finished before the hang-up")

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await probe.wait_started()
        await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    return time.monotonic()


@pytest.mark.parametrize("path", ["message:send", "message:stream"])
async def test_rest_hang_up_cancels_an_interactive_run(path: str) -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=5, steps=50))
    async with served(app) as url, httpx.AsyncClient() as http:
        hung_up = await hang_up_once_working(http, url, probe, path, send_body("chat"),
                                             stream=path == "message:stream")
        [task_id] = probe.started
        task = await wait_state(http, url, task_id, "TASK_STATE_CANCELED")
        assert task["status"]["message"]["metadata"] == {"reason": "hang-up"}
        assert probe.cancelled[task_id] - hung_up < 3.0  # milliseconds in practice
        assert task_id not in probe.finished
        assert app.runner.active == 0
        await eventually(lambda: app.open_requests == 0)  # trio: answers arrive before send()
                                                          # returns


@pytest.mark.parametrize("path", ["message:send", "message:stream"])
async def test_rest_hang_up_leaves_a_detached_run_to_finish(path: str) -> None:
    """The CRM case over REST: a detach rule on the request metadata, then a hang-up."""
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.4), policy=RunPolicy.from_rules(["evoai_crm_event"]))
    async with served(app) as url, httpx.AsyncClient() as http:
        body = send_body("re-engage", metadata={"evoai_crm_event": "inactivity_action"})
        await hang_up_once_working(http, url, probe, path, body,
                                   stream=path == "message:stream")
        [task_id] = probe.started
        task = await wait_state(http, url, task_id, "TASK_STATE_COMPLETED")
        assert task["status"]["message"]["parts"][0]["text"] == "done: re-engage"
        assert not probe.cancelled


async def test_shutdown_refuses_new_rest_sends_and_records_the_waiting_callers_run() -> None:
    """Shutdown treats a REST caller as a JSON-RPC one: new sends get 503 (SERVER_UNAVAILABLE),
    the run a blocking caller waits on is cancelled and recorded; the caller gets that task
    (reason ``shutdown``), unless hypercorn dropped its connection first, which ends the run as
    a hang-up (as for JSON-RPC: the order is serve()'s, not the binding's)."""
    probe = Probe()
    app = A2AApp(probe.agent(seconds=30, steps=300), grace=0.5)
    shutdown = anyio.Event()
    answer: dict[str, Any] = {}
    async with anyio.create_task_group() as tg, httpx.AsyncClient(timeout=20) as http:
        port = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, grace=0.5,
            task_status=task_status))
        url = f"http://127.0.0.1:{port}/"

        async def waiting_caller() -> None:
            try:
                r = await http.post(url + "message:send", json=send_body("long"), headers=V1)
            except httpx.TransportError:
                answer["dropped"] = True
            else:
                answer["status"], answer["body"] = r.status_code, r.json()

        tg.start_soon(waiting_caller)
        await probe.wait_started()
        app.begin_shutdown()
        r = await http.post(url + "message:send", json=send_body("late"), headers=V1)
        assert_error(r, 503, "SERVER_UNAVAILABLE", "UNAVAILABLE")
        shutdown.set()
    [task_id] = probe.started
    stored, _ = await app.store.get(task_id)
    assert stored.status.state.name == "CANCELED"
    assert stored.status.message is not None
    if "dropped" in answer:  # hypercorn's grace ended first: the caller's hang-up ended the run
        assert stored.status.message.metadata in ({"reason": "shutdown"}, {"reason": "hang-up"})
    else:
        assert answer["status"] == 200
        assert answer["body"]["task"]["status"]["message"]["metadata"] == {"reason": "shutdown"}


# --- our client over REST ----------------------------------------------------------------


async def test_a2a_client_over_rest() -> None:
    app = A2AApp(demo_agent, grace=1.0)
    async with served(app) as url, A2AClient(url, transport="rest") as client:
        assert await client.binding() == "rest"
        task = await client.send("hello")
        assert task.status.state.name == "COMPLETED"  # type: ignore[union-attr]
        async with client.stream("a b") as events:
            kinds = [e.kind async for e in events]
        assert kinds[0] == "task" and kinds[-1] == "statusUpdate"
        got = await client.get_task(task.id, history_length=1)  # type: ignore[union-attr]
        assert len(got.history or []) == 1
        assert (await client.list_tasks(page_size=1)).next_page_token
        with pytest.raises(TaskNotCancelable):
            await client.cancel(got.id)
        with pytest.raises(TaskNotFound) as err:
            await client.get_task("no-such-task")
        assert err.value.code == -32001
        # REST has no trajectory route: the read goes to the JSON-RPC interface.
        page = await client.read_trajectory(got.id)
        assert page.events
        running = await client.send("slow 1", return_immediately=True)
        async with client.subscribe(running.id) as events:
            first = await events.__anext__()
            assert first.kind == "task" and first.position is not None
        async with client.subscribe(running.id, last_event_id=first.position) as events:
            resumed = [e async for e in events]
        assert resumed[0].kind != "task"  # resumed after the snapshot, not a new snapshot
        assert all(e.position is not None and e.position > first.position for e in resumed)
        assert resumed[-1].kind == "statusUpdate"
    async with served(A2AApp(demo_agent)) as url, A2AClient(
        url, transport="rest", version="0.3"
    ) as client:
        with pytest.raises(VersionNotSupported):
            await client.send("hi")


async def test_an_error_after_the_stream_started_is_one_error_event_then_the_end() -> None:
    """The REST stream's late error: ``event: error`` with the error body (what the a2a-sdk
    REST client reads), then the body ends; our client raises it as the A2A error."""
    from scoped_a2a.client.rest import unwrap_rest_event
    from scoped_a2a.client.sse import SSEDecoder
    from scoped_a2a.server.rest import _RestOutput

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    out = _RestOutput(send, write_timeout=5)
    await out.event(b'{"task":{"id":"t"}}', 0)
    await out.error(TaskNotFound("task 't' was evicted"))
    await out.finish()  # a second end is a no-op
    assert sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert [m.get("more_body") for m in sent[1:]] == [True, True, False]
    events = SSEDecoder().feed(body)
    assert [(e.event, e.id) for e in events] == [("message", "0"), ("error", None)]
    assert unwrap_rest_event(events[0]) == b'{"task":{"id":"t"}}'
    with pytest.raises(TaskNotFound, match="evicted"):
        unwrap_rest_event(events[1])
