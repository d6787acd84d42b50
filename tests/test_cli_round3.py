"""What a new user met in round three, as real ``python -m scoped_a2a serve`` processes:

- ``--agent ./myagent.py:agent`` gave a TypeError about relative imports: a file path is
  accepted now (and a missing file is one line saying what to give);
- an agent module whose import raises said ``importing it raised KeyError: 'missing'`` with
  no file or line: the line now says where (the agent file's line, not ``os.py``'s);
- ``serve --grpc`` did not say in its start-up line that gRPC is on: it does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from .test_cli import StderrLog, stopped_cleanly
from .test_cli_newcomer import ENV, run

AGENT_FILE = '''\
from scoped_a2a import RunContext


async def agent(ctx: RunContext) -> str:
    return "file agent heard " + ctx.text
'''

BROKEN_FILE = '''\
import os

SETTING = 1
TOKEN = os.environ["SCOPED_A2A_SURELY_MISSING"]


async def agent(ctx):
    return "never"
'''


def _serve(cwd: Path, *args: str) -> tuple[subprocess.Popen[str], StderrLog]:
    proc = subprocess.Popen([sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", *args],
                            cwd=cwd, env=ENV, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    return proc, StderrLog(proc.stderr)


@pytest.mark.parametrize("form", ["./mine_round3.py", "mine_round3.py", "absolute"])
def test_an_agent_file_path_is_accepted(form: str, tmp_path: Path) -> None:
    (tmp_path / "mine_round3.py").write_text(AGENT_FILE)
    where = str(tmp_path / "mine_round3.py") if form == "absolute" else form
    proc, log = _serve(tmp_path, "--agent", f"{where}:agent")
    try:
        url = log.wait_for(r"serving on (http://\S+)").group(1)
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}
        r = httpx.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=10)
        status = r.json()["result"]["task"]["status"]
        assert status["message"]["parts"][0]["text"] == "file agent heard hello"
    finally:
        stopped_cleanly(proc, log)


def test_agent_files_that_cannot_be_served_are_one_line_naming_where(tmp_path: Path) -> None:
    (tmp_path / "broken_round3.py").write_text(BROKEN_FILE)
    (tmp_path / "pkg_round3").mkdir()
    (tmp_path / "pkg_round3" / "__init__.py").write_text("")
    (tmp_path / "pkg_round3" / "broken.py").write_text(BROKEN_FILE)
    for agent, wanted in (
            ("./broken_round3.py:agent", "broken_round3.py:4"),  # a file path
            ("pkg_round3.broken:agent", "pkg_round3/broken.py:4"),  # a module name
            ("./nowhere.py:agent", "no such file './nowhere.py'"),
    ):
        done = run("serve", "--port", "0", "--agent", agent, cwd=tmp_path)
        assert done.returncode == 2, (agent, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (agent, done.stderr)
        assert wanted in lines[0] and "Traceback" not in done.stderr, (agent, lines[0])
        if "no such file" not in wanted:
            assert "KeyError: 'SCOPED_A2A_SURELY_MISSING'" in lines[0], lines[0]
            assert "os.py" not in lines[0], lines[0]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_start_up_line_says_grpc_is_served(backend: str, tmp_path: Path) -> None:
    proc, log = _serve(tmp_path, "--grpc", "--backend", backend)
    try:
        line = log.wait_for(r"serving on http://\S+ \(.*\)").group(0)
        assert f"({backend}; HTTP/2; gRPC lf.a2a.v1.A2AService on the same port)" in line, line
    finally:
        stopped_cleanly(proc, log)
    proc, log = _serve(tmp_path, "--http2", "--backend", backend)
    try:
        line = log.wait_for(r"serving on http://\S+ \(.*\)").group(0)
        assert line.endswith(f"({backend}; HTTP/2)"), line
    finally:
        stopped_cleanly(proc, log)


def test_the_docs_say_what_a_new_user_sees() -> None:
    root = Path(__file__).resolve().parents[1]
    library = (root / "docs" / "library.md").read_text()
    assert "in one line with exit status 1" not in library  # it is 2 (test above)
    grpc_doc = (root / "docs" / "grpc.md").read_text()
    example = grpc_doc[grpc_doc.index("stub = a2a_pb2_grpc"):]
    example = example[:example.index("```")]
    # Each message its own id: the stream must not be answered with the send's task.
    assert textwrap.dedent(example).count('message_id="m1"') <= 1, example


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_send_stream_labels_every_chunk_by_the_artifacts_name(backend: str,
                                                              tmp_path: Path) -> None:
    """``send --stream`` labelled an ADK agent's artifact by its name on the first chunk and
    by its id after (ADK names only the first), and printed an empty last chunk as ``''``."""
    root = Path(__file__).resolve().parents[1]
    proc, log = _serve(root, "--agent", "tests.cli_agents:chunked", "--backend", backend)
    try:
        url = log.wait_for(r"serving on (http://\S+)").group(1)
        done = run("send", url, "hi", "--stream")
        assert done.returncode == 0, done.stderr
        chunks = [line for line in done.stdout.splitlines() if line.startswith("[artifact")]
        assert chunks == ["[artifact reply] 'Hel'", "[artifact reply] 'lo'",
                          "[artifact reply] (end)"], done.stdout
    finally:
        stopped_cleanly(proc, log)
