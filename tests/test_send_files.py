"""``send --out DIR`` saves the files an agent answers with under DIR/files, and a filename can
never place a file anywhere else (the agent is not trusted with paths)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scoped_a2a import Part, RunContext
from scoped_a2a.client.saved_files import safe_filename

from .test_cli import ROOT, start, stop

HOSTILE = ["../../escape.txt", "/etc/passwd", "..", "C:\\Windows\\win.ini", "report.pdf",
           "report.pdf", "\x00\n", "bad\x1b[31mname.txt", None]


async def file_sender(ctx: RunContext) -> str:
    for n, name in enumerate(HOSTILE):
        await ctx.artifact(name="files", parts=[Part(raw=f"file {n}".encode(), filename=name)])
    return "sent"


@pytest.mark.parametrize(("name", "safe"), [
    ("../../escape.txt", "escape.txt"), ("/etc/passwd", "passwd"), ("..", "fallback"),
    ("C:\\Windows\\win.ini", "win.ini"), ("", "fallback"), (None, "fallback"),
    (".hidden", "hidden"), ("a\x00b", "a_b"), ("x" * 300 + ".pdf", "x" * 116 + ".pdf"),
])
def test_safe_filename(name: str | None, safe: str) -> None:
    assert safe_filename(name, "fallback") == safe


def test_send_out_saves_files_only_inside_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "run" / "out"
    proc, url, log = start("--agent", "tests.test_send_files:file_sender")
    try:
        sent = subprocess.run(
            [sys.executable, "-m", "scoped_a2a", "send", url, "go", "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        stop(proc, log)
    assert sent.returncode == 0, sent.stderr
    files = out / "files"
    saved = sorted(p.name for p in files.iterdir())
    assert saved == sorted(["escape.txt", "passwd", "files-3.bin", "win.ini", "report.pdf",
                            "report (2).pdf", "files-7.bin", "bad_[31mname.txt",
                            "files-9.bin"])
    assert (files / "escape.txt").read_bytes() == b"file 0"
    assert (files / "report (2).pdf").read_bytes() == b"file 5"
    # Nothing anywhere else: the only things under tmp_path are the folder's own.
    outside = [p for p in tmp_path.rglob("*") if out not in p.parents and p != out
               and p not in out.parents]
    assert outside == []
    assert f"saved {files / 'escape.txt'}" in sent.stdout
