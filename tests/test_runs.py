"""Run outcomes: returned -> completed, raised -> failed, ask -> input-required and resume."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext, RunPolicy
from scoped_a2a.agents.demo import demo_agent

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


async def test_an_agent_that_raises_fails_the_task_with_a_message(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoped_a2a")
    app = A2AApp(demo_agent)
    async with served(app) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {"message": text_message("fail")})
        status = body["result"]["task"]["status"]
        assert status["state"] == "TASK_STATE_FAILED"
        # The caller sees the type and an error id, not the text (test_error_exposure.py).
        assert status["message"]["parts"][0]["text"].startswith("RuntimeError (error id ")
    ends = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run end")]
    assert any("outcome=failed" in m and "reason=error" in m and "duration_ms=" in m
               for m in ends)


async def test_a_non_string_reply_fails_the_task() -> None:
    async def wrong(ctx: RunContext) -> str:
        return 42  # type: ignore[return-value]

    async with served(A2AApp(wrong)) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {"message": text_message("x")})
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_FAILED"


async def test_ask_interrupts_then_the_follow_up_resumes_the_same_run() -> None:
    app = A2AApp(demo_agent)
    async with served(app) as url, httpx.AsyncClient() as client:
        first = await rpc(client, url, "SendMessage", {"message": text_message("ask")})
        task = first["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert task["status"]["message"]["parts"][0]["text"] == "What should I echo?"
        # The blocking caller has gone, but a run waiting for input is not a hang-up.
        await anyio.sleep(0.1)
        assert app.runner.active == 1
        follow = await rpc(client, url, "SendMessage", {
            "message": text_message("pineapple", taskId=task["id"])})
        done = follow["result"]["task"]
        assert done["id"] == task["id"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["status"]["message"]["parts"][0]["text"] == "You said: pineapple"
        texts = [m["parts"][0]["text"] for m in done["history"]]
        assert texts[0] == "ask" and "pineapple" in texts


async def test_ask_times_out_into_failed() -> None:
    app = A2AApp(demo_agent, policy=RunPolicy(input_timeout=0.2))
    async with served(app) as url, httpx.AsyncClient() as client:
        first = await rpc(client, url, "SendMessage", {"message": text_message("ask")})
        task_id = first["result"]["task"]["id"]
        with anyio.fail_after(5):
            while app.runner.active:
                await anyio.sleep(0.02)
        got = await rpc(client, url, "GetTask", {"id": task_id})
        assert got["result"]["status"]["state"] == "TASK_STATE_FAILED"


async def test_history_length_trims_history() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message("hi"), "configuration": {"historyLength": 1}})
        history = body["result"]["task"]["history"]
        assert len(history) == 1 and history[0]["role"] == "ROLE_AGENT"
        task_id = body["result"]["task"]["id"]
        got = await rpc(client, url, "GetTask", {"id": task_id, "historyLength": 0})
        assert "history" not in got["result"]
        got = await rpc(client, url, "GetTask", {"id": task_id})
        assert len(got["result"]["history"]) == 2


async def test_list_tasks_pages_and_filters() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as client:
        ids = []
        for i in range(5):
            body = await rpc(client, url, "SendMessage", {
                "message": text_message(f"m{i}", contextId="ctx-a" if i % 2 else "ctx-b")})
            ids.append(body["result"]["task"]["id"])
        seen, token = [], ""
        while True:
            page = (await rpc(client, url, "ListTasks", {"pageSize": 2, "pageToken": token}))
            result = page["result"]
            seen += [t["id"] for t in result["tasks"]]
            assert result["totalSize"] == 5
            assert all("artifacts" not in t for t in result["tasks"])
            token = result.get("nextPageToken", "")
            if not token:
                break
        assert seen == list(reversed(ids))
        only_a = (await rpc(client, url, "ListTasks", {"contextId": "ctx-a",
                                                       "includeArtifacts": True}))["result"]
        assert {t["id"] for t in only_a["tasks"]} == {ids[1], ids[3]}
        assert all(t["artifacts"] for t in only_a["tasks"])


async def test_an_agent_that_catches_the_end_of_its_ask_cannot_work_on_for_no_one() -> None:
    """The agent gives up waiting for input on its own and carries on: an interactive run that
    nobody holds is cancelled then (reason hang-up), not left working unowned; a detached one
    goes on."""
    worked: list[str] = []

    async def impatient(ctx: RunContext) -> str:
        with anyio.move_on_after(0.2):
            await ctx.ask("anything?")
        worked.append(f"{ctx.task_id} started")
        await anyio.sleep(0.3)
        worked.append(f"{ctx.task_id} finished")
        return "went on without an answer"

    app = A2AApp(impatient)
    async with served(app) as url, httpx.AsyncClient() as client:
        sent = await rpc(client, url, "SendMessage", {"message": text_message("go")})
        task = sent["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        with anyio.fail_after(5):
            while app.runner.active:
                await anyio.sleep(0.02)
        got = (await rpc(client, url, "GetTask", {"id": task["id"]}))["result"]
        assert got["status"]["state"] == "TASK_STATE_CANCELED"
        assert got["status"]["message"]["metadata"]["reason"] == "hang-up"
        assert f"{task['id']} finished" not in worked
        detached = await rpc(client, url, "SendMessage", {
            "message": text_message("go"), "metadata": {"onDisconnect": "continue"}})
        detached_id = detached["result"]["task"]["id"]
        with anyio.fail_after(5):
            while app.runner.active:
                await anyio.sleep(0.02)
        got = (await rpc(client, url, "GetTask", {"id": detached_id}))["result"]
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        assert f"{detached_id} finished" in worked
