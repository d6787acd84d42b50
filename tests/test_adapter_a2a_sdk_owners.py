"""An adapted a2a-sdk executor under authentication: it sees its caller as a2a-sdk's ``User``,
and a message's ``referenceTaskIds`` reach it only for tasks of that same caller (another
caller's task is left out, as if it did not exist); a caller without a credential never reaches
the executor at all."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.adapters.a2a_sdk import from_executor
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys

from .helpers import rpc, served, text_message
from .sdk_executors import Journal, StreamingExecutor

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def test_related_tasks_and_the_user_are_the_callers_own(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice:alice-key\nbob:bob-key\n")
    journal = Journal()
    app = A2AApp(from_executor(StreamingExecutor(journal)),
                 authenticate=Authenticator([ApiKeys(keys)]))
    alice, bob = {"X-API-Key": "alice-key"}, {"X-API-Key": "bob-key"}
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        mine = (await rpc(c, url, "SendMessage", {"message": text_message("a")},
                          headers=alice))["result"]["task"]
        theirs = (await rpc(c, url, "SendMessage", {"message": text_message("b")},
                            headers=bob))["result"]["task"]
        ref = text_message("c", referenceTaskIds=[mine["id"], theirs["id"]])
        done = await rpc(c, url, "SendMessage", {"message": ref}, headers=alice)
        assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        anonymous = await c.post(url, headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": text_message("d")}})
        assert anonymous.status_code == 401
    assert journal.related[-1] == [mine["id"]]  # bob's task is not alice's to see
    assert [u[:2] for u in journal.users] == [(True, "alice"), (True, "bob"), (True, "alice")]
    assert len(journal.started) == 3  # the anonymous send never reached the executor
