"""Library use: the server nursery passed in explicitly, and app.running() without a server."""

from __future__ import annotations

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext

from .agents import Probe
from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


async def test_detached_runs_belong_to_the_nursery_passed_in() -> None:
    probe = Probe()
    async with anyio.create_task_group() as service:
        app = A2AApp(probe.agent(seconds=0.3), detached=service)
        async with served(app) as url, httpx.AsyncClient() as client:
            body = await rpc(client, url, "SendMessage", {
                "message": text_message("bg"), "configuration": {"returnImmediately": True}})
            task_id = body["result"]["task"]["id"]
            await probe.wait_started()
            # The run is a task of the service's group, not of the request or of hypercorn.
            assert any(t.name and task_id in t.name for t in anyio.get_running_tasks())
        # served() shut the server down; the run finished within the grace period.
        task, _ = await app.store.get(task_id)
        assert task.status.state.name == "COMPLETED"


async def test_cancelling_the_service_still_records_every_run() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=30, steps=300))
    async with anyio.create_task_group() as service, app.running():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://a2a") as client:
            body = await rpc(client, "http://a2a/", "SendMessage", {
                "message": text_message("bg"),
                "configuration": {"returnImmediately": True}})
        await probe.wait_started()
        service.cancel_scope.cancel()  # the whole service is cancelled from outside
        await anyio.sleep(10)
    task, _ = await app.store.get(body["result"]["task"]["id"])
    assert task.status.state.name == "CANCELED"
    # Cancelled from outside, with no grace period: recorded all the same, reason "nursery".
    assert task.status.message is not None and task.status.message.metadata == {
        "reason": "nursery"}
    assert "server nursery was cancelled" in task.status.message.parts[0].text


async def test_an_app_that_is_not_running_refuses_sends_clearly() -> None:
    async def agent(ctx: RunContext) -> str:
        return "never"

    app = A2AApp(agent)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://a2a") as client:
        body = await rpc(client, "http://a2a/", "SendMessage", {"message": text_message("x")})
    assert body["error"]["code"] == -32000
    assert "not running" in body["error"]["message"]
