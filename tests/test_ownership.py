"""Who owns a run: hang-ups cancel interactive runs; detached runs finish whoever hangs up.

Everything goes through real HTTP to hypercorn, on asyncio and on trio.
"""

from __future__ import annotations

import time

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunPolicy

from .agents import Probe
from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio


async def hang_up_once_working(client: httpx.AsyncClient, url: str, probe: Probe,
                               body: dict, *, after: float = 0.0) -> float:
    """POST, then drop the connection ``after`` seconds once the probe's run has started (so
    the request has certainly arrived, however slow the machine); return the monotonic
    hang-up time."""

    async def post() -> None:
        await client.post(url, json=body, headers={"A2A-Version": "1.0"})
        raise AssertionError("the request finished before the hang-up")

    async with anyio.create_task_group() as tg:
        tg.start_soon(post)
        await probe.wait_started()
        await anyio.sleep(after)
        tg.cancel_scope.cancel()
    return time.monotonic()


def send_body(text: str, *, method: str = "SendMessage", **params: object) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method,
            "params": {"message": text_message(text), **params}}


async def task_state(client: httpx.AsyncClient, url: str, task_id: str) -> dict:
    body = await rpc(client, url, "GetTask", {"id": task_id})
    return body["result"]


async def wait_for_state(client: httpx.AsyncClient, url: str, task_id: str, state: str,
                         timeout: float = 5.0) -> dict:
    with anyio.fail_after(timeout):
        while True:
            task = await task_state(client, url, task_id)
            if task["status"]["state"] == state:
                return task
            await anyio.sleep(0.02)


async def test_crm_system_event_survives_hang_up() -> None:
    """The CRM case: a system event matched by a detach rule completes after a hang-up (the
    CRM hangs up after 80 ms: here, as soon as the run works)."""
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.4),
                 policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action,new_lead"]))
    async with served(app) as url, httpx.AsyncClient() as client:
        body = send_body("write a re-engagement message",
                         metadata={"evoai_crm_event": "inactivity_action"})
        await hang_up_once_working(client, url, probe, body)
        [task_id] = probe.started
        task = await wait_for_state(client, url, task_id, "TASK_STATE_COMPLETED")
        reply = task["status"]["message"]["parts"][0]["text"]
        assert reply == "done: write a re-engagement message"
        assert not probe.cancelled


async def test_detach_rule_matches_message_metadata_too() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.3), policy=RunPolicy.from_rules(["evoai_crm_event"]))
    async with served(app) as url, httpx.AsyncClient() as client:
        body = send_body("x")
        body["params"]["message"]["metadata"] = {"evoai_crm_event": "anything"}
        await hang_up_once_working(client, url, probe, body)
        [task_id] = probe.started
        await wait_for_state(client, url, task_id, "TASK_STATE_COMPLETED")


async def test_interactive_hang_up_cancels_the_run_promptly() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=5, steps=50),
                 policy=RunPolicy.from_rules(["evoai_crm_event=inactivity_action"]))
    async with served(app) as url, httpx.AsyncClient() as client:
        # Metadata that does not match the rule: the run stays interactive.
        hung_up = await hang_up_once_working(
            client, url, probe, send_body("chat", metadata={"evoai_crm_event": "other"}),
            after=0.1)
        [task_id] = probe.started
        task = await wait_for_state(client, url, task_id, "TASK_STATE_CANCELED")
        assert task["status"]["message"]["metadata"] == {"reason": "hang-up"}
        assert probe.cancelled[task_id] - hung_up < 3.0  # milliseconds in practice
        assert task_id not in probe.finished
        assert app.runner.active == 0


async def test_return_immediately_detaches_and_cancel_on_disconnect_off_detaches_all() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.3))
    async with served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message("later"), "configuration": {"returnImmediately": True}})
        task_id = body["result"]["task"]["id"]
        assert body["result"]["task"]["status"]["state"] in (
            "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        await wait_for_state(client, url, task_id, "TASK_STATE_COMPLETED")

    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.3), policy=RunPolicy(cancel_on_disconnect=False))
    async with served(app) as url, httpx.AsyncClient() as client:
        await hang_up_once_working(client, url, probe, send_body("keep going"))
        [task_id] = probe.started
        await wait_for_state(client, url, task_id, "TASK_STATE_COMPLETED")


async def test_v03_blocking_false_detaches() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.2))
    async with served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "message/send", {
            "message": text_message("later", v1=False), "configuration": {"blocking": False}},
            version=None)
        assert body["result"]["kind"] == "task"
        await wait_for_state(client, url, body["result"]["id"], "TASK_STATE_COMPLETED")


async def test_a_second_subscriber_keeps_the_run_alive_until_it_leaves() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=3, steps=30))
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        stream_req = send_body("long", method="SendStreamingMessage")
        seen_first: list[int] = []
        seen_second: list[int] = []
        async with anyio.create_task_group() as tg:
            first_scope = anyio.CancelScope()
            second_scope = anyio.CancelScope()

            async def first() -> None:
                with first_scope:
                    async with client.stream("POST", url, json=stream_req) as resp:
                        async for event_id, _ in sse_events(resp):
                            assert event_id is not None
                            seen_first.append(event_id)

            tg.start_soon(first)
            await probe.wait_started()
            [task_id] = probe.started

            async def second() -> None:
                sub = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask",
                       "params": {"id": task_id}}
                with second_scope:
                    async with client.stream("POST", url, json=sub) as resp:
                        async for event_id, _ in sse_events(resp):
                            assert event_id is not None
                            seen_second.append(event_id)

            tg.start_soon(second)
            with anyio.fail_after(5):  # both see the same events for a while
                while len(set(seen_first) & set(seen_second)) < 2:
                    await anyio.sleep(0.01)
            first_scope.cancel()  # the caller that started the run hangs up
            await anyio.sleep(0.5)
            state = (await task_state(client, url, task_id))["status"]["state"]
            assert state == "TASK_STATE_WORKING", "the subscriber should keep the run alive"
            assert task_id not in probe.cancelled
            second_scope.cancel()  # the last holder leaves
        task = await wait_for_state(client, url, task_id, "TASK_STATE_CANCELED")
        assert task["status"]["message"]["metadata"] == {"reason": "hang-up"}
        # Both saw the same events in the same order where they overlapped.
        overlap = [i for i in seen_first if i in set(seen_second)]
        assert overlap == [i for i in seen_second if i in set(seen_first)]
        assert len(overlap) >= 2


async def test_cancel_task_cancels_the_run_and_terminal_tasks_are_not_cancelable() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=5, steps=50))
    async with served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message("stop me"), "configuration": {"returnImmediately": True}})
        task_id = body["result"]["task"]["id"]
        await probe.wait_started()
        cancelled = await rpc(client, url, "CancelTask", {"id": task_id})
        assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert cancelled["result"]["status"]["message"]["metadata"] == {"reason": "CancelTask"}
        assert task_id in probe.cancelled
        again = await rpc(client, url, "CancelTask", {"id": task_id})
        assert again["error"]["code"] == -32002
        # 0.3 name, same semantics
        again03 = await rpc(client, url, "tasks/cancel", {"id": task_id}, version=None)
        assert again03["error"]["code"] == -32002
        assert (await task_state(client, url, task_id))["status"]["state"] == "TASK_STATE_CANCELED"


async def test_shutdown_gives_detached_runs_grace_then_records_the_rest() -> None:
    probe = Probe()
    quick, slow = probe.agent(seconds=0.3, steps=3), probe.agent(seconds=30, steps=300)

    async def agent(ctx):  # type: ignore[no-untyped-def]
        return await (quick if ctx.text == "quick" else slow)(ctx)

    app = A2AApp(agent, grace=1.0)
    async with served(app, grace=1.0) as url, httpx.AsyncClient() as client:
        ids = {}
        for text in ("quick", "slow"):
            body = await rpc(client, url, "SendMessage", {
                "message": text_message(text), "configuration": {"returnImmediately": True}})
            ids[text] = body["result"]["task"]["id"]
        await probe.wait_started(2)
        started = time.monotonic()
    # served() has shut the server down gracefully; the store still holds both outcomes.
    assert time.monotonic() - started < 8
    quick_task, _ = await app.store.get(ids["quick"])
    slow_task, _ = await app.store.get(ids["slow"])
    assert quick_task.status.state.name == "COMPLETED"
    assert slow_task.status.state.name == "CANCELED"
    assert slow_task.status.message is not None
    assert slow_task.status.message.metadata == {"reason": "shutdown"}
    assert app.runner.active == 0


async def test_new_sends_are_refused_once_shutdown_begins() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.1))
    async with served(app) as url, httpx.AsyncClient() as client:
        app.begin_shutdown()
        body = await rpc(client, url, "SendMessage", {"message": text_message("late")})
        assert body["error"]["code"] == -32000
        assert "shutting down" in body["error"]["message"]
        listed = await rpc(client, url, "ListTasks", {})
        assert listed["result"]["tasks"] == [] or listed["result"].get("tasks") is None
