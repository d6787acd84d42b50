"""``serve --agent``: what a new user points it at is served, or refused in one line (exit 2)
before anything listens; ``serve --card FILE`` sets the card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .helpers import text_message
from .test_cli import ROOT, start, stop


def refused(*args: str, cwd: Path = ROOT) -> str:
    """Run ``serve`` expecting a start-up refusal; return its one line of stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "serving on" not in proc.stderr
    return lines[0]


def send(url: str, text: str) -> dict[str, object]:
    r = httpx.post(url, headers={"A2A-Version": "1.0"}, timeout=10, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": text_message(text)}})
    task: dict[str, object] = r.json()["result"]["task"]
    return task


def test_an_agent_with_two_parameters_is_refused() -> None:
    line = refused("--agent", "tests.loading_agents:two_args")
    assert "cannot be called with one argument" in line


def test_something_that_is_not_an_agent_is_refused() -> None:
    line = refused("--agent", "tests.loading_agents:not_an_agent")
    assert "is a dict, not an agent" in line


@pytest.mark.parametrize(("source", "expected"), [
    ("def broken(:\n", "syntax error at badmod.py:1"),
    ("raise RuntimeError('no config file')\n", "importing it raised RuntimeError: no config"),
    ("import no_such_dependency_here\n", "imports 'no_such_dependency_here', which is not"),
    # A framework's package missing (as in an install without its extra) names the extra.
    ("raise ModuleNotFoundError('gone', name='pydantic_ai.agent')\n",
     "imports 'pydantic_ai.agent', which is not installed: pip install 'scoped-a2a[pydantic-ai]'"),
])
def test_a_module_that_fails_to_import_is_one_line(
        tmp_path: Path, source: str, expected: str) -> None:
    (tmp_path / "badmod.py").write_text(source)
    assert expected in refused("--agent", "badmod:agent", cwd=tmp_path)


def test_an_executor_on_trio_is_refused_saying_to_use_asyncio() -> None:
    line = refused("--agent", "tests.loading_agents:executor", "--backend", "trio")
    assert line.endswith("runs on asyncio only, not trio: serve it with --backend asyncio")


def test_an_a2aapp_is_served_with_its_agent_and_the_card_set_in_code() -> None:
    proc, url, log = start("--agent", "tests.loading_agents:app")
    try:
        card = httpx.get(url + ".well-known/agent-card.json").json()
        assert card["name"] == "Set in code"
        task = send(url, "hi")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"  # type: ignore[index]
    finally:
        stop(proc, log)


def test_an_executor_is_served_with_its_modules_card_and_card_file_overrides(
        tmp_path: Path) -> None:
    card_file = tmp_path / "card.json"
    card_file.write_text(json.dumps({"description": "from --card"}))
    proc, url, log = start("--agent", "tests.loading_agents:executor", "--backend", "asyncio",
                           "--card", str(card_file))
    try:
        card = httpx.get(url + ".well-known/agent-card.json").json()
        assert card["name"] == "Executor card"
        assert card["description"] == "from --card"
        assert [s["id"] for s in card["skills"]] == ["echo"]
        task = send(url, "hello")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"  # type: ignore[index]
    finally:
        stop(proc, log)


def test_a_card_file_that_is_not_a_json_object_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "card.json"
    bad.write_text("[1, 2]")
    assert "must hold a JSON object" in refused("--card", str(bad))
    assert "No such file" in refused("--card", str(tmp_path / "missing.json"))
