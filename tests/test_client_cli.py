"""``python -m scoped_a2a send``, run as a real process against a served agent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import scoped_a2a
from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent

from .helpers import served

pytestmark = pytest.mark.anyio

SRC = str(Path(scoped_a2a.__file__).resolve().parents[1])


async def send(*args: str) -> tuple[int, str, str]:
    import anyio

    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "scoped_a2a", "send", *args], env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_send_follows_and_writes_the_trajectory(tmp_path: Path, anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent)) as url:
        code, out, err = await send(url, "hello cli", "--follow", "--json",
                                    "--out", str(tmp_path), "--backend", anyio_backend)
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert {x["source"] for x in lines[:-1]} == {"trajectory"}
        assert any(x["kind"] == "trajectory" for x in lines)  # the agent's own events
        assert lines[-1]["source"] == "result"
        assert lines[-1]["event"]["status"]["state"] == "TASK_STATE_COMPLETED"
        first = json.loads((tmp_path / "next.json").read_text())["turn"]
        assert json.loads((tmp_path / first / "end.json").read_text())["state"] == (
            "TASK_STATE_COMPLETED")
        assert json.loads((tmp_path / first / "next.json").read_text()) == {"turn": None}

        code, out, err = await send(url, "hi", "--stream", "--backend", anyio_backend)
        assert code == 0, err
        assert out.splitlines()[0].startswith("task ") and "[artifact reply]" in out
        assert out.splitlines()[-1].endswith("completed: You said: hi")


async def test_send_exits_non_zero_with_a_clear_message(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent)) as url:
        code, _out, err = await send(url, "fail", "--backend", anyio_backend)
        assert code == 1
        assert "failed: RuntimeError (error id " in err
    code, _out, err = await send(url, "hi", "--backend", anyio_backend)  # the server is gone
    assert code == 3
    assert err.startswith("error: cannot reach the agent at ")


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_send_transport_picks_the_binding(anyio_backend: str) -> None:
    async with served(A2AApp(demo_agent)) as url:
        for transport, path in (("rest", "message:stream"), ("jsonrpc", "")):
            code, out, err = await send(url, "hi", "--transport", transport, "--stream",
                                        "--log-level", "INFO", "--backend", anyio_backend)
            assert code == 0, err
            assert out.splitlines()[-1].endswith("completed: You said: hi")
            # httpx logs every request it makes: the turn went to this binding's route.
            assert f'POST {url}{path} "HTTP/1.1 200' in err, err
        code, _out, err = await send(url, "hi", "--transport", "rest", "--a2a-version", "0.3",
                                     "--backend", anyio_backend)
        assert code == 2
        assert err == ("error: the HTTP+JSON (REST) binding is A2A 1.0 only; use --transport "
                       "jsonrpc with --a2a-version 0.3\n")
