"""The tree of calls (task metadata ``downstreamTasks``, store/snapshot.py DOWNSTREAM_KEY) is the
server's record of the tasks a run started with ``ctx.call``: nobody else writes it.

Nothing in the server acts on the record, but whoever walks the tree does (docs/hops.md: GetTask
on each agent in turn; a tool that cancels a whole tree sends CancelTask down it, with its own
credentials). A forged entry would send that walker, and its credentials, to any URL, and have
it cancel a task that is not part of the tree (another owner's, on another agent). So a caller's
request metadata and an agent's published status updates (a relay passing on a downstream
agent's metadata, an adapted framework's events) may not carry the key: it is dropped, as
``detachedBy`` is, and the rest of their metadata is kept.

End to end over real HTTP (hypercorn, both backends): A's agent calls B with ``ctx.call``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.protocol.types import TaskState, TaskStatus, TaskStatusUpdateEvent
from scoped_a2a.store.snapshot import DOWNSTREAM_KEY

from .helpers import rpc, served, sse_events, text_message

pytestmark = pytest.mark.anyio

FORGED = {"agent": "http://198.51.100.7/", "taskId": "another-owners-task", "contextId": "c"}


async def b_agent(ctx: RunContext) -> str:
    return "b done"


def a_agent(b_url: list[str]) -> Any:
    async def agent(ctx: RunContext) -> str:
        if ctx.text == "relay":  # passes on metadata it was given (a relay, an adapter)
            await ctx.publish(TaskStatusUpdateEvent(
                task_id=ctx.task_id, context_id=ctx.context_id,
                status=TaskStatus(state=TaskState.WORKING),
                metadata={DOWNSTREAM_KEY: [FORGED], "step": "relayed"}))
        await ctx.call(b_url[0], "hello")
        return "a done"
    return agent


def _downstream_entries(metadata: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((metadata or {}).get(DOWNSTREAM_KEY) or [])


async def test_a_caller_cannot_write_the_tree_of_calls() -> None:
    b_url: list[str] = []
    async with served(A2AApp(b_agent)) as b, served(A2AApp(a_agent(b_url))) as a:
        b_url.append(b)
        async with httpx.AsyncClient(timeout=10) as http:
            sent = await rpc(http, a, "SendMessage", {
                "message": text_message("call b"),
                "metadata": {DOWNSTREAM_KEY: [FORGED], "crm": "lead-7"}})
            assert "result" in sent, sent
            task = sent["result"]["task"]
            got = await rpc(http, a, "GetTask", {"id": task["id"]})
    for seen in (task, got["result"]):
        entries = _downstream_entries(seen.get("metadata"))
        assert [e["agent"] for e in entries] == [b], (
            f"the tree should hold only the call A's run made (to {b}): {seen.get('metadata')}")
        assert seen["metadata"]["crm"] == "lead-7", seen["metadata"]  # the rest is kept


async def test_an_agents_published_status_cannot_write_the_tree_of_calls() -> None:
    b_url: list[str] = []
    async with served(A2AApp(b_agent)) as b, served(A2AApp(a_agent(b_url))) as a:
        b_url.append(b)
        async with httpx.AsyncClient(timeout=10) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                    "params": {"message": text_message("relay")}}
            live: list[dict[str, Any]] = []
            async with http.stream("POST", a, json=body,
                                   headers={"A2A-Version": "1.0"}) as response:
                assert response.status_code == 200
                async for _, frame in sse_events(response):
                    live.append(frame["result"])
            task_id = next(iter(live[0].values()))["id"]
            got = await rpc(http, a, "GetTask", {"id": task_id})
    updates = [e["statusUpdate"] for e in live if "statusUpdate" in e]
    seen_live = [entry for u in updates for entry in _downstream_entries(u.get("metadata"))]
    assert [e["agent"] for e in seen_live] == [b], f"streamed status metadata: {updates}"
    assert any((u.get("metadata") or {}).get("step") == "relayed" for u in updates), updates
    stored = _downstream_entries(got["result"].get("metadata"))
    assert [e["agent"] for e in stored] == [b], f"A's task metadata: {got['result']}"


async def _asks_once(ctx: RunContext) -> str:
    return "got " + await ctx.ask("which lead?")


@pytest.mark.parametrize("binding", ["jsonrpc-0.3", "rest"])
async def test_a_follow_up_cannot_write_the_server_keys(binding: str) -> None:
    """Both server keys (the tree of calls, ``detachedBy``) in a new send's and in its
    follow-up's request and message metadata, over the 0.3 JSON-RPC binding and HTTP+JSON:
    the stored task never holds them, and the rest of the metadata is kept."""
    forged = {DOWNSTREAM_KEY: [FORGED], "detachedBy": "forged", "crm": "lead-7"}
    v1 = binding == "rest"

    async def send(http: httpx.AsyncClient, url: str, text: str,
                   task: dict[str, Any] | None) -> dict[str, Any]:
        ids = {"taskId": task["id"], "contextId": task["contextId"]} if task else {}
        params = {"message": {**text_message(text, v1=v1, **ids), "metadata": forged},
                  "metadata": forged}
        if v1:
            r = await http.post(url + "message:send", json=params, headers={"A2A-Version": "1.0"})
            assert r.status_code == 200, r.text
            return dict(r.json()["task"])
        sent = await rpc(http, url, "message/send", params, version=None)
        assert "result" in sent, sent
        return dict(sent["result"])

    async with served(A2AApp(_asks_once)) as url, httpx.AsyncClient(timeout=10) as http:
        first = await send(http, url, "lead", None)
        second = await send(http, url, "lead 7", first)
        stored = (await rpc(http, url, "GetTask", {"id": first["id"]}))["result"]
    assert stored["status"]["state"] == "TASK_STATE_COMPLETED", stored["status"]
    for seen in (first, second, stored):
        meta = seen.get("metadata") or {}
        assert DOWNSTREAM_KEY not in meta and "detachedBy" not in meta, meta
        assert meta.get("crm") == "lead-7", meta
