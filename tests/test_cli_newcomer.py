"""The command line as a new user meets it: real ``python -m scoped_a2a`` / ``scoped-a2a`` runs.

Mistakes get one line and a non-zero exit, not a traceback; help says what every option does
and its default; ``send`` can answer a task that needs input.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import scoped_a2a
from scoped_a2a import A2AApp, DirectorySink, RunContext, serve
from scoped_a2a.agent_loading import is_async_callable
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.server.card import build_card

from .helpers import served
from .test_cli import StderrLog, stop

SRC = str(Path(scoped_a2a.__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
SCRIPT = Path(sys.executable).with_name("scoped-a2a")


def run(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scoped_a2a", *args], env=ENV, cwd=cwd,
                          capture_output=True, text=True, timeout=30)


async def arun(*args: str) -> tuple[int, str, str]:
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "scoped_a2a", *args], env=ENV, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def arun_all(*commands: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """Run independent CLI commands at once (each is a process start); results in order."""
    results: list[tuple[int, str, str]] = [(-1, "", "")] * len(commands)

    async def one(i: int, command: tuple[str, ...]) -> None:
        results[i] = await arun(*command)

    async with anyio.create_task_group() as tg:
        for i, command in enumerate(commands):
            tg.start_soon(one, i, command)
    return results


# --- serve: mistakes are one line ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_serve_on_a_busy_port_says_so_in_one_line(backend: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run("serve", "--backend", backend, "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: port {port} on 127.0.0.1 is in use; pick another with --port"]


def test_an_unknown_log_level_is_refused_and_any_case_is_accepted() -> None:
    done = run("serve", "--log-level", "verbose")
    assert done.returncode == 2
    assert "argument --log-level: invalid choice: 'VERBOSE'" in done.stderr
    # Accepted in lower case: the command goes on to fail on the unreachable agent (3), not on
    # its arguments (2).
    done = run("send", "http://127.0.0.1:9/", "hi", "--log-level", "debug", "--timeout", "2")
    assert done.returncode == 3, done.stderr


@pytest.mark.parametrize("spec", ["json:dumps", "tests.test_cli_newcomer:SyncAgent"])
def test_a_non_async_agent_is_refused_at_start_up(spec: str) -> None:
    done = run("serve", "--port", "0", "--agent", spec, cwd=Path(SRC).parent)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: --agent {spec} "), line


class SyncAgent:
    def __call__(self, ctx: RunContext) -> str:
        return "sync"


class AsyncAgent:
    async def __call__(self, ctx: RunContext) -> str:
        return "async"


def test_what_counts_as_an_async_agent() -> None:
    assert is_async_callable(demo_agent)
    assert is_async_callable(AsyncAgent())
    assert is_async_callable(functools.partial(demo_agent))
    assert not is_async_callable(AsyncAgent)  # the class: calling it builds an instance
    assert not is_async_callable(SyncAgent())
    assert not is_async_callable(json.dumps)
    assert not is_async_callable(lambda ctx: demo_agent(ctx))


AGENT_MODULE = '''
from scoped_a2a import RunContext

async def agent(ctx: RunContext) -> str:
    return "local agent heard " + ctx.text
'''


@pytest.mark.parametrize("how", ["script", "module"])
def test_an_agent_module_in_the_current_folder_is_found(how: str, tmp_path: Path) -> None:
    if how == "script" and not SCRIPT.exists():
        pytest.skip(f"the scoped-a2a script is not installed beside {sys.executable}")
    module = f"newcomer_agent_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(AGENT_MODULE))
    command = [str(SCRIPT)] if how == "script" else [sys.executable, "-m", "scoped_a2a"]
    proc = subprocess.Popen([*command, "serve", "--port", "0", "--agent", f"{module}:agent"],
                            cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = StderrLog(proc.stderr)
    try:
        url = log.wait_for(r"serving on (http://\S+)").group(1)
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}
        r = httpx.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=10)
        status = r.json()["result"]["task"]["status"]
        assert status["message"]["parts"][0]["text"] == "local agent heard hello"
    finally:
        stop(proc, log)


# --- help ------------------------------------------------------------------------------------


def test_version() -> None:
    done = run("--version")
    assert done.returncode == 0
    assert re.fullmatch(r".+ \d+\.\d+\S*\n", done.stdout), done.stdout


@pytest.mark.parametrize("command", ["serve", "send", "worker"])
def test_help_describes_every_option_with_its_default(command: str) -> None:
    from scoped_a2a.cli.parser import build_parser as _parser

    done = run(command, "--help")
    assert done.returncode == 0
    sub = next(a for a in _parser()._actions if a.dest == "command").choices[command]
    assert sub.description, f"{command} has no description"
    assert sub.description.split()[0] in done.stdout
    for action in sub._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings[0]} has no help"
        if action.default not in (None, False, []):
            formatted = sub.formatter_class(prog="x")._get_help_string(action) or ""
            assert "default" in formatted, f"{command} {action.option_strings[0]}"
    for default in {"serve": ["(default: 8000)", "(default: trio)", "(default: INFO)"],
                    "send": ["(default: no limit;", "(default: WARNING)"],
                    "worker": ["(default: 16)"]}[command]:
        assert default in " ".join(done.stdout.split()), (default, done.stdout)


def test_send_help_lists_the_exit_codes() -> None:
    done = run("send", "--help")
    codes = re.findall(r"^  (\d+) ", done.stdout.split("exit status:")[1], re.M)
    assert codes == ["0", "1", "2", "3", "124", "130"]


# --- send ------------------------------------------------------------------------------------


def message_agent() -> Starlette:
    """An A2A agent that replies with a plain Message (no task), streaming or not."""

    async def card(request: Request) -> Response:
        return JSONResponse(build_card(str(request.base_url), name="message-agent"))

    async def rpc(request: Request) -> Response:
        call = await request.json()
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_AGENT",
                   "parts": [{"text": "just a message"}]}
        frame = {"jsonrpc": "2.0", "id": call["id"], "result": {"message": message}}
        if call["method"] == "SendStreamingMessage":
            async def events() -> AsyncIterator[bytes]:
                yield b"data: " + json.dumps(frame).encode() + b"\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return JSONResponse(frame)

    return Starlette(routes=[Route("/.well-known/agent-card.json", card),
                             Route("/", rpc, methods=["POST"])])


@pytest.mark.anyio
async def test_send_stream_prints_a_message_reply_once(anyio_backend: str) -> None:
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve(
            message_agent(), port=0, shutdown=shutdown, grace=1.0, task_status=task_status))
        try:
            code, out, err = await arun("send", f"http://127.0.0.1:{port}/", "hi", "--stream",
                                        "--backend", anyio_backend)
        finally:
            shutdown.set()
    assert (code, out) == (0, "[message] just a message\n"), err


@pytest.mark.anyio
async def test_send_answers_a_task_that_needs_input(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        code, out, err = await arun("send", url, "ask", "--backend", anyio_backend)
        assert code == 0
        assert re.fullmatch(r"task \w+ input-required: What should I echo\?\n", out)
        ids = re.search(r"--task-id (\w+) --context-id (\w+)", err)
        assert ids, err
        code, out, err = await arun("send", url, "pineapple", "--task-id", ids.group(1),
                                    "--context-id", ids.group(2), "--backend", anyio_backend)
        assert (code, out) == (0, f"task {ids.group(1)} completed: You said: pineapple\n"), err


def test_send_stream_with_follow_is_refused_in_one_line() -> None:
    done = run("send", "http://127.0.0.1:9/", "hi", "--stream", "--follow")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "--follow" in done.stderr


@pytest.mark.anyio
async def test_send_out_refuses_a_folder_with_an_earlier_chain(
        tmp_path: Path, anyio_backend: str) -> None:
    out_dir = tmp_path / "trajectory"
    async with served(A2AApp(demo_agent, grace=1.0)) as url:
        code, _out, err = await arun("send", url, "first", "--out", str(out_dir),
                                     "--backend", anyio_backend)
        assert code == 0, err
        before = sorted(p.relative_to(out_dir) for p in out_dir.rglob("*"))
        code, out, err = await arun("send", url, "second", "--out", str(out_dir),
                                    "--backend", anyio_backend)
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        f"error: {out_dir} already holds a step's trajectories ({out_dir / 'next.json'} "
        "exists); write to a new folder"]
    assert sorted(p.relative_to(out_dir) for p in out_dir.rglob("*")) == before
    with pytest.raises(FileExistsError, match="write to a new folder"):
        DirectorySink(out_dir)
