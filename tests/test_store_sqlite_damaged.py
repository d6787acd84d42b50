"""A damaged store file at start-up, as real ``serve --store sqlite:PATH`` processes (both
backends), on damaged copies of a file a real server wrote.

Found: 50 flipped bytes past the first page (the header intact) ended start-up with a 67-line
traceback (``recovery.py: COMMIT: database disk image is malformed``), exit 1, and the
start-up had written to the damaged file. Now it is one line naming the file and what to do
(salvage with ``sqlite3 FILE .recover``, or move it away), exit 2, and the file's bytes are
unchanged. The same for damage SQLite's check cannot see: a stored JSON value that no longer
decodes.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from .helpers import rpc
from .redis.conftest import ROOT, Proc
from .sqlite_serving import AGENT, sqlite_serve  # noqa: F401 (the serve fixture)

pytestmark = pytest.mark.anyio
PAGE = 4096


def _message(text: str, message_id: str) -> dict[str, object]:
    return {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}


async def _written_store(serve: Callable[..., Proc], tmp_path: Path) -> Path:
    """A store file as a real server leaves it when killed: 40 ended tasks with 2 KB texts and
    3 detached runs in flight (their tasks running, their runs queued); its WAL folded in, as
    the next start would fold it."""
    proc = serve()
    url = await proc.url()
    async with httpx.AsyncClient(timeout=30) as client:
        for i in range(40):
            done = await rpc(client, url, "SendMessage",
                             {"message": _message(f"hello {i} " + "x" * 2000, f"m{i}")})
            assert "result" in done, done
        for i in range(3):
            await rpc(client, url, "SendMessage", {"message": _message("sleep 30", f"s{i}"),
                                                   "configuration": {"returnImmediately": True}})
    await anyio.sleep(0.3)
    proc.kill()
    db = tmp_path / "tasks.db"
    with sqlite3.connect(db) as conn:  # a plain SQLite client, as `sqlite3 tasks.db` would
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert conn.execute("SELECT count(*) FROM tasks WHERE ended_at IS NULL").fetchone()[0]
    assert db.stat().st_size > 12 * PAGE
    return db


def _intact(path: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?immutable=1", uri=True)) as c:
            return bool(c.execute("PRAGMA quick_check").fetchall() == [("ok",)])
    except sqlite3.DatabaseError:
        return False


def _copy(db: Path, where: Path) -> Path:
    where.mkdir()
    copy = where / "tasks.db"
    shutil.copy(db, copy)
    shutil.copy(db.with_name("tasks.db.key"), where / "tasks.db.key")
    return copy


def _start(path: Path, backend: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scoped_a2a", "serve", "--backend", backend, "--port", "0",
         "--agent", AGENT, "--store", f"sqlite:{path}"],
        capture_output=True, text=True, timeout=30, cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "PATH": "/usr/bin:/bin"})


def _refused_in_one_line(path: Path, backend: str) -> str:
    before = path.read_bytes()
    done = _start(path, backend)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    line = lines[0]
    assert f"{path} is damaged" in line and "nothing was written" in line, line
    assert f"sqlite3 {path} .recover" in line and f"move {path}" in line, line
    assert "Traceback" not in done.stderr
    assert path.read_bytes() == before  # not a byte written to the damaged file
    wal = path.with_name("tasks.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    return line


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_a_damaged_file_is_refused_in_one_line_and_left_as_it_was(
        serve: Callable[..., Proc], tmp_path: Path, anyio_backend: str) -> None:
    db = await _written_store(serve, tmp_path)
    # 50 bytes flipped at random past the first page, until SQLite's own check (on a
    # read-only, immutable connection: nothing written) finds the b-trees damaged; most
    # flips land inside stored values, which only the JSON decode notices (the second case).
    broken = _copy(db, tmp_path / "flipped")
    clean = broken.read_bytes()
    for seed in range(500):
        data = bytearray(clean)
        for i in random.Random(seed).sample(range(PAGE, len(data)), 50):
            data[i] ^= 0xFF
        broken.write_bytes(bytes(data))
        if not _intact(broken):
            break
    else:
        raise AssertionError("no seed damaged the b-trees")
    assert "SQLite" in _refused_in_one_line(broken, anyio_backend)
    # A running task's snapshot that no longer decodes (SQLite's pages are all intact).
    garbled = _copy(db, tmp_path / "garbled")
    with sqlite3.connect(garbled) as conn:
        conn.execute("UPDATE tasks SET snap = CAST('{\"id\": 5' AS BLOB) WHERE seq = ("
                     "SELECT min(seq) FROM tasks WHERE ended_at IS NULL)")
    conn.close()
    assert "does not decode" in _refused_in_one_line(garbled, anyio_backend)
    # The undamaged file still serves (the refusal is the damage, not the file's shape).
    second = serve()
    await second.url()
