"""Push delivery end to end: a real webhook receiver on loopback (allowed explicitly), real HTTP
through hypercorn, on asyncio and trio."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext, RunPolicy, TaskState
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.push import PushSettings

from .helpers import rpc, served, text_message
from .push_receiver import Receiver, eventually, receiving

pytestmark = pytest.mark.anyio

FAST = {"first_backoff": 0.05, "max_backoff": 0.2}


async def crm_agent(ctx: RunContext) -> str:
    """Writes a re-engagement message to a lead: slower than the CRM's 80 ms patience."""
    await ctx.working("writing a re-engagement message")  # WORKING again: not a state change
    await anyio.sleep(0.3)
    await ctx.artifact(f"Hi {ctx.metadata.get('lead', 'there')}, still interested?",
                       name="message")
    return "message written"


def push_config(url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, "id": "crm", "token": "crm-token", **extra}


async def deliveries(client: httpx.AsyncClient, url: str, task_id: str) -> list[dict[str, Any]]:
    body = await rpc(client, url, "scoped_a2a/push/deliveries", {"taskId": task_id})
    result: list[dict[str, Any]] = body["result"]["deliveries"]
    return result


@pytest.mark.parametrize("v1", [True, False], ids=["1.0", "0.3"])
async def test_crm_event_delivered_once_after_hang_up(v1: bool) -> None:
    receiver = Receiver()
    working = anyio.Event()

    async def agent(ctx: RunContext) -> str:
        working.set()
        return await crm_agent(ctx)

    app = A2AApp(agent, policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action"]),
                 push=PushSettings(allow_hosts=["127.0.0.1"], **FAST))
    async with receiving(receiver) as hook, served(app) as url, httpx.AsyncClient() as client:
        meta = {"evoai_crm_event": "inactivity_action", "lead": "Ana"}
        if v1:
            method, version = "SendMessage", "1.0"
            params = {"message": text_message("inactivity", metadata=meta),
                      "configuration": {"taskPushNotificationConfig": push_config(hook)}}
        else:
            method, version = "message/send", None
            params = {"message": text_message("inactivity", v1=False, metadata=meta),
                      "configuration": {"pushNotificationConfig": push_config(hook)}}
        frame = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

        async def post() -> None:
            await client.post(url, json=frame, headers={"A2A-Version": version} if version
                              else {})
            raise AssertionError("the send answered before the CRM hung up")

        # The CRM hangs up after 80 ms: here once the run works (so the request has
        # certainly arrived, however slow the machine), well before it ends.
        async with anyio.create_task_group() as tg:
            tg.start_soon(post)
            with anyio.fail_after(10):
                await working.wait()
            tg.cancel_scope.cancel()

        await eventually(lambda: app.push.active == 0 and bool(receiver.requests))
        got = receiver.requests
        if v1:
            kinds = [next(iter(r.json)) for r in got]
            assert kinds == ["statusUpdate", "task"]  # in order: working, then the result
            assert got[0].json["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
            task = got[1].json["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            parts = task["artifacts"][0]["parts"]
        else:
            assert [r.json["kind"] for r in got] == ["task", "task"]
            assert [r.json["status"]["state"] for r in got] == ["working", "completed"]
            task = got[1].json
            parts = task["artifacts"][0]["parts"]
        assert parts[0]["text"] == "Hi Ana, still interested?"
        # Exactly once: one completed delivery, each delivery with its own key, all answered.
        completed = [r for r in got if "completed" in r.body.decode().lower()]
        assert len(completed) == 1
        assert len({r.headers["idempotency-key"] for r in got}) == len(got) == 2
        assert all(r.headers["x-a2a-notification-token"] == "crm-token" for r in got)
        assert all(r.headers["content-type"] == "application/json" for r in got)
        records = await deliveries(client, url, task["id"])
        assert [(r["state"], r["status"], r["attempts"]) for r in records] == [
            ("TASK_STATE_WORKING", "delivered", 1), ("TASK_STATE_COMPLETED", "delivered", 1)]
        # Nothing left behind: the hung-up request ended (the handler's epilogue may trail
        # the answer that the last call got, so wait for it).
        await eventually(lambda: app.open_requests == 0)


async def test_503_twice_then_200_is_delivered_once_after_retries() -> None:
    receiver = Receiver(answers=[503, 503])
    app = A2AApp(demo_agent, push=PushSettings(allow_hosts=["127.0.0.1"], **FAST))
    async with receiving(receiver) as hook, served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message("hello"),
            "configuration": {"taskPushNotificationConfig": push_config(hook)}})
        task_id = body["result"]["task"]["id"]
        await eventually(lambda: app.push.active == 0)
        got = receiver.requests
        assert [r.status for r in got] == [503, 503, 200, 200]
        # The first delivery (working) three times: one key, one body. The completed task
        # waited behind it (in order) and was accepted once.
        assert len({r.headers["idempotency-key"] for r in got[:3]}) == 1
        assert len({r.body for r in got[:3]}) == 1
        assert got[3].headers["idempotency-key"] != got[0].headers["idempotency-key"]
        working, completed = receiver.accepted()
        assert working.json["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
        assert completed.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        records = await deliveries(client, url, task_id)
        assert [(r["state"], r["status"], r["attempts"], r["lastError"]) for r in records] == [
            ("TASK_STATE_WORKING", "delivered", 3, None),
            ("TASK_STATE_COMPLETED", "delivered", 1, None)]


async def test_receiver_that_never_answers_fails_within_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="scoped_a2a.push")
    receiver = Receiver(hang=True)
    settings = PushSettings(allow_hosts=["127.0.0.1"], deliver="terminal", read_timeout=0.2,
                            attempt_timeout=0.3, retry_for=1.0, **FAST)
    app = A2AApp(demo_agent, push=settings)
    async with receiving(receiver) as hook, served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message("hello"),
            "configuration": {"taskPushNotificationConfig": push_config(hook)}})
        task_id = body["result"]["task"]["id"]
        ended = anyio.current_time()
        await eventually(lambda: app.push.active == 0, timeout=settings.retry_for + 4)
        elapsed = anyio.current_time() - ended
        [record] = await deliveries(client, url, task_id)
        assert record["status"] == "failed"
        assert record["reason"].startswith("gave up after")
        assert "timed out" in record["lastError"] or "no answer" in record["lastError"]
        # Retries while a whole attempt (0.3 s) fits in retry_for (1 s); each attempt that got
        # through to the receiver is recorded there.
        assert 2 <= record["attempts"] <= 4
        assert 1 <= len(receiver.requests) <= record["attempts"]
        assert all(r.status == 0 for r in receiver.requests)  # it never answered
        # Bounded: retry_for (1 s) plus scheduling slack; generous on a loaded machine.
        assert elapsed < settings.retry_for + 3
    assert any("push failed" in r.getMessage() and task_id in r.getMessage()
               for r in caplog.records)


async def test_shutdown_records_pending_deliveries_as_undelivered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="scoped_a2a.push")
    receiver = Receiver(answers=[503] * 10_000)  # down for the whole test
    app = A2AApp(demo_agent, grace=0.5, push=PushSettings(
        allow_hosts=["127.0.0.1"], retry_for=60, shutdown_grace=0.3, **FAST))
    async with receiving(receiver) as hook:
        async with served(app) as url, httpx.AsyncClient() as client:
            body = await rpc(client, url, "SendMessage", {
                "message": text_message("hello"),
                "configuration": {"taskPushNotificationConfig": push_config(hook)}})
            task = body["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            await eventually(lambda: len(receiver.requests) >= 2)  # retrying the first one
        # The server is gone: what happened is in its records and its log.
        assert app.push.active == 0
        records = app.push.records.for_task(task["id"])
        assert [(r.state, r.status) for r in records] == [
            (TaskState.WORKING, "undelivered"), (TaskState.COMPLETED, "undelivered")]
        assert all("shut down" in (r.reason or "") for r in records)
        # In order: the completed state was never sent while the working one was pending.
        assert records[0].attempts >= 2 and records[1].attempts == 0
        assert records[0].last_error is not None and "503" in records[0].last_error
    logged = [r.getMessage() for r in caplog.records if "push undelivered" in r.getMessage()]
    assert len(logged) == 2 and all(task["id"] in m for m in logged)


async def test_auth_headers_and_signature() -> None:
    import base64
    import hashlib
    import hmac

    receiver = Receiver()
    secret = "whsec_" + base64.b64encode(b"0123456789abcdef").decode()
    app = A2AApp(demo_agent, push=PushSettings(
        allow_hosts=["127.0.0.1"], deliver="terminal", bearer_token="server-token",
        signing_secret=secret, **FAST))
    async with receiving(receiver) as hook, served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message("ask"),  # input-required: the task waits for us
            "configuration": {"taskPushNotificationConfig": {
                "url": hook, "id": "own", "authentication": {"scheme": "Basic",
                                                            "credentials": "dXNlcjpwdw=="}}}})
        task_id = body["result"]["task"]["id"]
        created = await rpc(client, url, "CreateTaskPushNotificationConfig",
                            {"taskId": task_id, "id": "plain", "url": hook + "?plain=1"})
        assert created["result"] == {"taskId": task_id, "id": "plain", "url": hook + "?plain=1"}
        await rpc(client, url, "SendMessage", {"message": text_message(
            "echo me", taskId=task_id)})
        await eventually(lambda: app.push.active == 0 and len(receiver.requests) == 2)
    by_auth = {r.headers.get("authorization"): r for r in receiver.requests}
    assert set(by_auth) == {"Basic dXNlcjpwdw==", "Bearer server-token"}
    for r in receiver.requests:
        assert r.headers["webhook-id"] == r.headers["idempotency-key"]
        signed = f"{r.headers['webhook-id']}.{r.headers['webhook-timestamp']}.".encode() + r.body
        mac = hmac.new(b"0123456789abcdef", signed, hashlib.sha256).digest()
        assert r.headers["webhook-signature"] == "v1," + base64.b64encode(mac).decode()
        assert r.json["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert "x-a2a-notification-token" not in r.headers


async def test_redirect_is_not_followed() -> None:
    receiver = Receiver(answers=[307], headers=[(b"location", b"http://127.0.0.1:1/elsewhere")])
    app = A2AApp(demo_agent,
                 push=PushSettings(allow_hosts=["127.0.0.1"], deliver="terminal", **FAST))
    async with receiving(receiver) as hook, served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message("hi"),
            "configuration": {"taskPushNotificationConfig": push_config(hook)}})
        await eventually(lambda: app.push.active == 0)
        [record] = await deliveries(client, url, body["result"]["task"]["id"])
    assert len(receiver.requests) == 1
    assert record["status"] == "failed" and record["attempts"] == 1
    assert "redirects are not followed" in record["reason"]


async def test_config_id_defaults_and_unknown_task() -> None:
    app = A2AApp(demo_agent, push=PushSettings(allow_hosts=["127.0.0.1"]))
    async with served(app) as url, httpx.AsyncClient() as client:
        missing = uuid.uuid4().hex
        err = await rpc(client, url, "CreateTaskPushNotificationConfig",
                        {"taskId": missing, "url": "http://127.0.0.1:9/hook"})
        assert err["error"]["code"] == -32001
        err = await rpc(client, url, "scoped_a2a/push/deliveries", {"taskId": missing})
        assert err["error"]["code"] == -32001
        err = await rpc(client, url, "CreateTaskPushNotificationConfig",
                        {"url": "http://127.0.0.1:9/hook"})
        assert err["error"]["code"] == -32602 and "taskId" in err["error"]["message"]


async def test_deleting_a_config_ends_its_pending_delivery() -> None:
    receiver = Receiver(answers=[503] * 10_000)
    app = A2AApp(demo_agent, push=PushSettings(allow_hosts=["127.0.0.1"], retry_for=60, **FAST))
    async with receiving(receiver) as hook, served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "message/send", {
            "message": text_message("hello", v1=False),
            "configuration": {"pushNotificationConfig": push_config(hook)}}, version=None)
        task_id = body["result"]["id"]
        await eventually(lambda: len(receiver.requests) >= 1)
        gone = await rpc(client, url, "tasks/pushNotificationConfig/delete",
                         {"id": task_id, "pushNotificationConfigId": "crm"}, version=None)
        assert gone["result"] is None
        await eventually(lambda: app.push.active == 0)
        [record] = await deliveries(client, url, task_id)
        assert record["status"] == "undelivered" and "deleted" in record["reason"]
        listed = await rpc(client, url, "tasks/pushNotificationConfig/list", {"id": task_id},
                           version=None)
        assert listed["result"] == []


def test_backoff_doubles_is_capped_and_jittered() -> None:
    from scoped_a2a.push.delivery import Sender

    sender = Sender(PushSettings(first_backoff=0.5, max_backoff=4.0))
    for retry in range(1, 12):
        full = min(4.0, 0.5 * 2 ** (retry - 1))
        waits = [sender.backoff(retry) for _ in range(200)]
        assert all(full / 2 <= w <= full for w in waits)
        assert len(set(waits)) > 1  # jittered: failing deliveries do not retry in lockstep
