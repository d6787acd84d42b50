"""Every example that calls a model runs offline, as its docstring says: the fake endpoint
served from a shell (``python -m scoped_a2a.testing.fake_llm``), the example served by
``python -m scoped_a2a serve`` with ``MODEL_URL`` pointing at it, and a send answered with the
fake model's text. Real processes, as a user starts them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .helpers import free_port, rpc, text_message
from .redis.conftest import ROOT, Proc

pytestmark = pytest.mark.anyio

EXAMPLES = {  # the example's module -> the attribute ``serve --agent`` is given
    "examples.pydantic_ai_agent.agent": "agent",
    "examples.adk_agent.agent": "agent",
    "examples.a2a_sdk_agent.agent": "executor",
}
NEEDS = {"examples.pydantic_ai_agent.agent": "pydantic_ai",
         "examples.adk_agent.agent": "google.adk", "examples.a2a_sdk_agent.agent": "a2a"}


class Module(Proc):
    """``python -m MODULE ARGS`` with ``env`` added to the environment, its log in a file."""

    def __init__(self, module: str, args: list[str], log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.args, self.log = [module, *args], log
        full = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}  # no key
        full.update(env or {}, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
        with log.open("wb") as out:
            self.popen = subprocess.Popen([sys.executable, "-m", module, *args], stdout=out,
                                          stderr=out, stdin=subprocess.DEVNULL, env=full,
                                          cwd=ROOT)


@pytest.mark.parametrize("module", sorted(EXAMPLES))
def test_each_model_examples_docstring_says_how_to_run_it_offline(module: str) -> None:
    path = ROOT / (module.replace(".", "/") + ".py")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert "python -m scoped_a2a.testing.fake_llm" in doc, (path, doc[-600:])
    assert "MODEL_URL=http://127.0.0.1:8001/v1" in doc, (path, doc[-600:])


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
@pytest.mark.parametrize("module", sorted(EXAMPLES))
async def test_each_model_example_answers_offline_from_the_fake_endpoint(
        module: str, tmp_path: Path, anyio_backend: str) -> None:
    pytest.importorskip(NEEDS[module])
    port = free_port()
    fake = Module("scoped_a2a.testing.fake_llm", ["--port", str(port), "--delay", "0"],
                  tmp_path / "fake.log")
    try:
        await fake.wait_for(r"fake model on http://127\.0\.0\.1:\d+/v1")
        # The example reads MODEL_URL and MODEL_NAME from its environment.
        agent = Module("scoped_a2a", ["serve", "--backend", "asyncio", "--port", "0",
                                      "--agent", f"{module}:{EXAMPLES[module]}"],
                       tmp_path / "serve.log",
                       env={"MODEL_URL": f"http://127.0.0.1:{port}/v1", "MODEL_NAME": "fake"})
        try:
            url = await agent.url()
            async with httpx.AsyncClient(timeout=60) as client:
                got = await rpc(client, url, "SendMessage",
                                {"message": text_message("hello offline")})
            assert "result" in got, (got, agent.text()[-2000:])
            task = got["result"].get("task") or {}
            # The reply streams in chunks: the artifact's text parts (or the status message).
            text = "".join(part.get("text", "") for artifact in task.get("artifacts") or ()
                           for part in artifact["parts"]) or str(got["result"])
            assert "(fake model) you said: hello offline" in text, (
                task.get("status"), agent.text()[-2000:], fake.text()[-1000:])
        finally:
            agent.stop()
    finally:
        fake.stop()


def test_the_fake_endpoint_refuses_bad_tool_args_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "scoped_a2a.testing.fake_llm", "--tool", "t",
                           "--args", "[1]"], capture_output=True, text=True, timeout=30,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 2, done.stderr
    assert "--args must be a JSON object" in done.stderr, done.stderr
