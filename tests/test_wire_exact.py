"""The 1.0 wire, exactly: ListTasks' required fields and filters, proto field names on input,
and the on-disconnect extension (a caller chooses what its hang-up does)."""

from __future__ import annotations

import datetime

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.agents.demo import demo_agent

from .agents import Probe
from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio

ON_DISCONNECT_URI = "https://github.com/scoped-a2a/scoped-a2a/ext/on-disconnect/v1"


async def test_list_tasks_writes_every_required_field_even_when_empty() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as client:
        empty = (await rpc(client, url, "ListTasks", {}))["result"]
        assert empty == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}
        for i in range(3):
            await rpc(client, url, "SendMessage", {"message": text_message(f"hi {i}")})
        first = (await rpc(client, url, "ListTasks", {"pageSize": 2}))["result"]
        assert len(first["tasks"]) == 2 and first["totalSize"] == 3 and first["pageSize"] == 2
        assert first["nextPageToken"] != ""
        last = (await rpc(client, url, "ListTasks",
                          {"pageSize": 2, "pageToken": first["nextPageToken"]}))["result"]
        assert len(last["tasks"]) == 1
        assert last["nextPageToken"] == ""  # present, empty: the last page


async def test_status_timestamp_after_keeps_tasks_at_or_after_the_time() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as client:
        task = (await rpc(client, url, "SendMessage",
                          {"message": text_message("hi")}))["result"]["task"]
        stamp = task["status"]["timestamp"]  # e.g. 2026-12-01T07:30:00.123Z
        when = datetime.datetime.fromisoformat(stamp)

        async def listed(after: str) -> list[str]:
            res = (await rpc(client, url, "ListTasks", {"statusTimestampAfter": after}))
            return [t["id"] for t in res["result"]["tasks"]]

        assert await listed(stamp) == [task["id"]]  # ">= the value", as the proto says
        # The same instant written with an offset and without milliseconds' padding.
        assert await listed(when.astimezone(datetime.timezone(
            datetime.timedelta(hours=2))).isoformat()) == [task["id"]]
        later = (when + datetime.timedelta(milliseconds=1)).isoformat()
        assert await listed(later) == []


async def test_proto_field_names_are_accepted_on_input() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as client:
        msg = {"message_id": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi there"}],
               # The keys of a free-form map are the caller's own: never renamed.
               "metadata": {"crm_event": "x", "nested": {"some_key": 1}}}
        sent = await rpc(client, url, "SendMessage",
                         {"message": msg, "configuration": {"history_length": 1}})
        task = sent["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert len(task["history"]) == 1  # history_length was read
        got = await rpc(client, url, "GetTask", {"id": task["id"], "history_length": 5})
        first = got["result"]["history"][0]
        assert first["messageId"] == "m-1"  # written back with the JSON name
        assert first["metadata"] == {"crm_event": "x", "nested": {"some_key": 1}}
        listed = await rpc(client, url, "ListTasks",
                           {"page_size": 1, "include_artifacts": True, "context_id":
                            task["contextId"]})
        [only] = listed["result"]["tasks"]
        assert only["id"] == task["id"] and only["artifacts"]
        # The JSON name wins where both are given.
        both = await rpc(client, url, "ListTasks", {"pageSize": 1, "page_size": 0})
        assert both["result"]["pageSize"] == 1


async def test_on_disconnect_continue_lets_an_interactive_run_finish() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=0.6))
    async with served(app) as url, httpx.AsyncClient() as client:
        params = {"message": text_message("work"), "metadata": {"onDisconnect": "continue"}}
        with anyio.move_on_after(0.15):  # the caller hangs up mid-run
            await rpc(client, url, "SendMessage", params)
        await probe.wait_started()
        [task_id] = probe.started
        with anyio.fail_after(5):
            while task_id not in probe.finished and task_id not in probe.cancelled:
                await anyio.sleep(0.02)
        assert task_id in probe.finished and task_id not in probe.cancelled
        got = await rpc(client, url, "GetTask", {"id": task_id})
        assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_on_disconnect_cancel_overrides_a_server_that_lets_runs_continue() -> None:
    probe = Probe()
    app = A2AApp(probe.agent(seconds=5), policy=RunPolicy(cancel_on_disconnect=False))
    async with served(app) as url, httpx.AsyncClient() as client:
        card = (await client.get(url + ".well-known/agent-card.json")).json()
        [ext] = [e for e in card["capabilities"]["extensions"] if e["uri"] == ON_DISCONNECT_URI]
        assert ext["params"]["default"] == "continue"  # this server's default
        params = {"message": text_message("work"), "metadata": {"onDisconnect": "cancel"}}
        async with anyio.create_task_group() as tg:
            tg.start_soon(rpc, client, url, "SendMessage", params)
            await probe.wait_started()
            tg.cancel_scope.cancel()  # the caller hangs up
        [task_id] = probe.started
        with anyio.fail_after(5):
            while task_id not in probe.cancelled:
                await anyio.sleep(0.02)
        got = await rpc(client, url, "GetTask", {"id": task_id})
        assert got["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert got["result"]["status"]["message"]["metadata"]["reason"] == "hang-up"


async def test_on_disconnect_with_a_bad_value_is_refused_and_creates_no_task() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as client:
        card = (await client.get(url + ".well-known/agent-card.json")).json()
        [ext] = [e for e in card["capabilities"]["extensions"] if e["uri"] == ON_DISCONNECT_URI]
        assert ext["params"]["default"] == "cancel"
        bad = await rpc(client, url, "SendMessage", {
            "message": text_message("hi"), "metadata": {"onDisconnect": "later"}})
        assert bad["error"]["code"] == -32602
        assert "onDisconnect" in bad["error"]["message"]
        assert (await rpc(client, url, "ListTasks", {}))["result"]["totalSize"] == 0
