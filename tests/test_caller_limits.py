"""Per-caller limits: one principal cannot fill the server with working or parked runs."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.runtime.limits import CallerLimits
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys

from .helpers import served, text_message
from .test_auth_matrix import post

pytestmark = pytest.mark.anyio


async def agent(ctx: RunContext) -> str:
    if ctx.text == "sleep":
        await anyio.sleep(30)
    elif ctx.text == "ask":
        return f"got {await ctx.ask('more?')}"
    return "done"


def send(text: str, **config: object) -> dict[str, object]:
    return {"message": text_message(text), "configuration": config}


async def test_runs_and_parked_runs_are_limited_per_caller(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-key\nbob:bob-key\n")
    app = A2AApp(agent, authenticate=Authenticator([ApiKeys(keys)]), grace=0.5,
                 caller_limits=CallerLimits(max_runs=1, max_parked=1))
    async with served(app) as url, httpx.AsyncClient(timeout=20) as client:
        outcome, sleeping = await post(client, url, "alice-key", "SendMessage",
                                       send("sleep", returnImmediately=True))
        assert outcome == "ok"
        outcome, err = await post(client, url, "alice-key", "SendMessage", send("hi"))
        assert outcome == -32029
        assert "max-runs-per-caller 1" in err["message"]
        # Another caller is not affected; the refused send stored nothing.
        assert (await post(client, url, "bob-key", "SendMessage", send("hi")))[0] == "ok"
        _, listed = await post(client, url, "alice-key", "ListTasks", {})
        assert len(listed["tasks"]) == 1
        # Parked runs: one may wait for alice's input; a second is refused, naming the limit.
        await post(client, url, "alice-key", "CancelTask", {"id": sleeping["task"]["id"]})
        with anyio.fail_after(10):  # the run's scope unwinds after the cancel is recorded
            while app.runner.get(sleeping["task"]["id"]) is not None:
                await anyio.sleep(0.01)
        outcome, parked = await post(client, url, "alice-key", "SendMessage", send("ask"))
        assert parked["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        outcome, err = await post(client, url, "alice-key", "SendMessage", send("ask"))
        assert outcome == -32029
        assert "max-parked-per-caller 1" in err["message"]
        # Answering the parked run is a follow-up, never refused; then a new task is fine.
        outcome, done = await post(client, url, "alice-key", "SendMessage", {
            "message": text_message("yes", taskId=parked["task"]["id"])})
        assert done["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert (await post(client, url, "alice-key", "SendMessage", send("hi")))[0] == "ok"
    assert app.runner.callers.refused == 2
