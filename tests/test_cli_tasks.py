"""``get``, ``list``, ``cancel``, ``subscribe`` and ``send --metadata``: real ``python -m
scoped_a2a`` processes against a server served by hypercorn in the test process, on both
backends (the CLI process runs on its own default backend, asyncio; ``--backend`` is tested by
the send tests).

Each command's output (text and ``--json``), its filters and paging, and its bad input: an
unknown task, another caller's task with API keys, a bad ``--state``, a server that is down.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.server.auth import Authenticator
from scoped_a2a.server.auth.api_keys import ApiKeys

from .helpers import rpc, served, text_message
from .test_cli_hardening import free_port
from .test_cli_newcomer import ENV, arun, arun_all

pytestmark = pytest.mark.anyio



async def start_task(url: str, text: str, *, key: str | None = None,
                     context_id: str | None = None) -> dict[str, Any]:
    """A detached task (returnImmediately), as the server recorded it when it answered."""
    extra = {"contextId": context_id} if context_id else {}
    async with httpx.AsyncClient(timeout=10) as client:
        body = await rpc(client, url, "SendMessage", {
            "message": text_message(text, **extra), "configuration": {"returnImmediately": True}},
            headers={"X-API-Key": key} if key else None)
    task: dict[str, Any] = body["result"]["task"]
    return task


async def get_task(url: str, task_id: str, *, key: str | None = None,
                   history: int | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"id": task_id}
    if history is not None:
        params["historyLength"] = history
    async with httpx.AsyncClient(timeout=10) as client:
        body = await rpc(client, url, "GetTask", params,
                         headers={"X-API-Key": key} if key else None)
    task: dict[str, Any] = body["result"]
    return task


async def ended(url: str, task_id: str, *, key: str | None = None) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            task = await get_task(url, task_id, key=key)
            if task["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_CANCELED",
                                           "TASK_STATE_FAILED"):
                return task
            await anyio.sleep(0.05)


def one_line(err: str) -> str:
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert "Traceback" not in err and "-320" not in err
    return err


@pytest.mark.one_python  # suite time: the CLI's listing does not change with the Python version
async def test_get_and_list_with_filters_and_pages(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        first = await start_task(url, "one", context_id="ctx-a")
        second = await start_task(url, "two", context_id="ctx-a")
        slow = await start_task(url, "slow 600", context_id="ctx-b")
        for t in (first, second):
            await ended(url, t["id"])

        (get_text, get_json, listed, in_context, working, completed) = await arun_all(
            ("get", url, first["id"]),
            ("get", url, first["id"], "--json", "--history-length", "0"),
            ("list", url),
            ("list", url, "--context", "ctx-a", "--json"),
            ("list", url, "--state", "working"),
            ("list", url, "--state", "TASK_STATE_COMPLETED", "--json", "--include-artifacts"))
        for code, _out, err in (get_text, get_json, listed, in_context, working, completed):
            assert code == 0, err
        assert get_text[1].splitlines() == [f"task {first['id']} completed: You said: one",
                                            "  context ctx-a",
                                            "  [artifact reply] 'You said: one'"]
        task = json.loads(get_json[1])
        assert task["id"] == first["id"] and task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert not task.get("history")
        rows = [line.split() for line in listed[1].splitlines()]
        assert [r[0] for r in rows] == [slow["id"], second["id"], first["id"]]  # newest first
        assert [r[1] for r in rows] == ["working", "completed", "completed"]
        assert [t["id"] for t in json.loads(in_context[1])["tasks"]] == [second["id"],
                                                                         first["id"]]
        assert [line.split()[0] for line in working[1].splitlines()] == [slow["id"]]
        page = json.loads(completed[1])
        assert [t["id"] for t in page["tasks"]] == [second["id"], first["id"]]
        assert all(t["artifacts"] for t in page["tasks"])

        # Paging: the next page's token on stderr, followed until the last page.
        seen: list[str] = []
        token: list[str] = []
        for _ in range(5):
            code, out, err = await arun("list", url, "--page-size", "2", *token)
            assert code == 0, err
            seen += [line.split()[0] for line in out.splitlines()]
            if not err:
                break
            assert err.startswith("more: --page-token "), err
            token = ["--page-token", err.split()[-1]]
        assert seen == [slow["id"], second["id"], first["id"]]

        code, out, err = await arun("cancel", url, slow["id"])
        assert code == 0, err
        assert out.startswith(f"task {slow['id']} canceled"), out


async def test_bad_input_is_one_line(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        done = await start_task(url, "hi")
        await ended(url, done["id"])
        *unknown, cancel_ended, subscribe_ended, bad_token = await arun_all(
            *((c, url, "no-such-task") for c in ("get", "cancel", "subscribe")),
            ("cancel", url, done["id"]), ("subscribe", url, done["id"]),
            ("list", url, "--page-token", "not-a-token"))
        for code, out, err in unknown:
            assert (code, out) == (3, ""), err
            assert "has no task by that id" in one_line(err), err
        code, out, err = cancel_ended  # already ended completed: printed, status 4
        assert code == 4 and out.startswith(f"task {done['id']} completed"), (code, out, err)
        assert f"task {done['id']} is completed, not canceled (it had already ended)" in err
        code, out, err = subscribe_ended
        assert (code, out) == (3, ""), err
        assert "is completed" in one_line(err)
        code, out, err = bad_token
        assert (code, out) == (3, "")
        assert one_line(err).startswith("error: the agent refused the call: "), err


def test_bad_options_and_a_server_that_is_down_are_one_line() -> None:
    """Refused before any call, or failing to connect: the server's backend plays no part,
    so this runs once (a sync test: each CLI process costs a start-up)."""
    url = f"http://127.0.0.1:{free_port()}/"  # nothing listens there: the server is gone

    async def all_of_them() -> list[tuple[int, str, str]]:
        return await arun_all(
            ("list", url, "--state", "sleeping"), ("list", url, "--page-size", "0"),
            ("send", url, "hi", "--metadata", "no-equals-sign"),
            ("get", url, "t1"), ("list", url), ("cancel", url, "t1"), ("subscribe", url, "t1"))

    bad_state, bad_size, bad_metadata, *down = anyio.run(all_of_them)
    code, out, err = bad_state
    assert (code, out) == (2, ""), err
    assert "'sleeping' is not a task state; one of: submitted, working" in one_line(err)
    code, out, err = bad_size
    assert code == 2 and "--page-size" in one_line(err)
    code, out, err = bad_metadata
    assert (code, out) == (2, "")
    assert one_line(err) == "error: --metadata takes KEY=VALUE, not 'no-equals-sign'\n"
    for code, out, err in down:
        assert (code, out) == (3, ""), err
        assert one_line(err).startswith(f"error: cannot reach the agent at {url}"), err


async def test_subscribe_prints_events_until_the_end_and_resumes(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        task = await start_task(url, "slow 600")
        async with await anyio.open_process(
                [sys.executable, "-m", "scoped_a2a", "subscribe", url, task["id"], "--json"],
                env=ENV) as proc:
            assert proc.stdout is not None
            lines: list[dict[str, Any]] = []
            buffer = b""
            with anyio.fail_after(30):
                async for chunk in proc.stdout:
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        lines.append(json.loads(line))
                    if len(lines) == 1:  # subscribed: now end the task under it
                        code, out, err = await arun("cancel", url, task["id"])
                        assert code == 0, err
                await proc.wait()
        assert proc.returncode == 1  # the task it followed was canceled
        assert lines[0]["kind"] == "task" and lines[0]["source"] == "stream"
        assert lines[-1]["kind"] == "statusUpdate"
        assert lines[-1]["event"]["status"]["state"] == "TASK_STATE_CANCELED"
        positions = [line["position"] for line in lines]
        assert positions == sorted(positions) and positions[0] is not None

        # Resume after the first event: only what came after it.
        after = positions[0]
        code, out, err = await arun("subscribe", url, task["id"], "--last-event-id", str(after))
        assert code == 1, err
        text = out.splitlines()
        assert text and all(int(line.split()[0]) > after for line in text), out
        assert text[-1].split()[1] == "[canceled]", out


async def test_another_callers_tasks_are_not_found(tmp_path: Path, anyio_backend: str) -> None:
    keys = tmp_path / "keys"
    keys.write_text("alice:token-alice-1\nbob:token-bob-1\n")
    app = A2AApp(demo_agent, authenticate=Authenticator([ApiKeys(keys)]), grace=1.0)
    async with served(app) as url:
        task = await start_task(url, "slow 600", key="token-alice-1")
        bob = ("--api-key", "token-bob-1")
        *refused, bob_lists, anonymous, alice_lists = await arun_all(
            *((c, url, task["id"], *bob) for c in ("get", "cancel", "subscribe")),
            ("list", url, "--token", "token-bob-1"), ("get", url, task["id"]),
            ("list", url, "--api-key", "token-alice-1"))
        for code, out, err in refused:
            assert (code, out) == (3, ""), err
            assert "has no task by that id" in one_line(err), err
        assert bob_lists == (0, "", "")
        code, out, err = anonymous
        assert (code, out) == (3, "")
        assert "the agent needs a credential and none was sent" in one_line(err), err
        code, out, err = alice_lists
        assert code == 0 and out.split()[:2] == [task["id"], "working"], (out, err)
        code, out, err = await arun("cancel", url, task["id"], "--api-key", "token-alice-1",
                                    "--json")
        assert code == 0, err
        assert json.loads(out)["status"]["state"] == "TASK_STATE_CANCELED"


async def test_send_metadata_reaches_the_server(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        # onDisconnect=continue: the run outlives the send that --timeout abandons.
        code, out, err = await arun("send", url, "slow 600", "--timeout", "1.5",
                                    "--metadata", "onDisconnect=continue",
                                    "--metadata", 'crm={"rule": 7}', "--metadata", "n=5",
                                    "--metadata", "note=not json")
        assert code == 124, err
        code, out, err = await arun("list", url, "--json", "--history-length", "1")
        assert code == 0, err
        (task,) = json.loads(out)["tasks"]
        assert task["status"]["state"] == "TASK_STATE_WORKING"  # not cancelled by the hang-up
        full = await get_task(url, task["id"], history=10)
        sent = next(m for m in full["history"] if m["role"] == "ROLE_USER")
        assert sent["metadata"] == {"onDisconnect": "continue", "crm": {"rule": 7}, "n": 5,
                                    "note": "not json"}
        code, out, err = await arun("cancel", url, task["id"])
        assert code == 0, err


@pytest.mark.parametrize("command", ["get", "list", "cancel", "subscribe"])
def test_help_describes_every_option_and_the_exit_statuses(command: str) -> None:
    import re

    from scoped_a2a.cli.parser import build_parser as _parser

    from .test_cli_newcomer import run

    done = run(command, "--help")
    assert done.returncode == 0, done.stderr
    sub = next(a for a in _parser()._actions if a.dest == "command").choices[command]
    assert sub.description and sub.description.split()[0] in done.stdout
    for action in sub._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{command} {action.option_strings[0]} has no help"
    for option in ("--json", "--timeout", "--token", "--api-key", "--cacert", "--cert", "--key"):
        assert option in done.stdout, option
    codes = re.findall(r"^  (\d+) ", done.stdout.split("exit status:")[1], re.M)
    expected = ["0", "2", "3", "124", "130"] if command == "list" else [
        "0", "2", "3", "4", "124", "130"] if command == "cancel" else [
        "0", "1", "2", "3", "124", "130"]
    assert codes == expected


def test_a_task_line_is_one_line_however_many_text_parts() -> None:
    """What ``send``, ``get`` and ``cancel`` print for a task (and ``send`` says on stderr when
    it failed): the status message's text parts joined on one line, other parts left out."""
    from scoped_a2a.cli.format import task_line
    from scoped_a2a.protocol.types import Message, Part, Role, Task, TaskState, TaskStatus

    said = Message(message_id="m1", role=Role.AGENT,
                   parts=[Part(text="It broke"), Part(data={"x": 1}), Part(text=": try again")])
    task = Task(id="t1", context_id="c1",
                status=TaskStatus(state=TaskState.FAILED, message=said))
    assert task_line(task) == "task t1 failed: It broke: try again"
    quiet = Task(id="t2", context_id="c1", status=TaskStatus(state=TaskState.WORKING))
    assert task_line(quiet) == "task t2 working"
