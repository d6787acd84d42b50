"""Scenario 17: the SQLite store next to the memory store (send, stream, bytes, restart).

scoped-a2a runs twice on each server (hypercorn trio, hypercorn asyncio, uvicorn): with its
in-memory store, then with ``--store sqlite:FILE`` (a fresh file in the run's work directory,
``synchronous=FULL``: each commit is fsynced), back to back, so the ratio sqlite/memory per
server is what to read. The send and stream figures come from scenarios 1 and 2's own
measurements (:class:`.send.Send`, :class:`.stream.Stream`), relabelled, as scenario 14 does for
Redis (the "stored" figures, bytes per event, are measured here, not by scenario 13).

Two more figures, once per run:

- bytes on disk per stored small event: one task with many small trajectory events appended
  through the store, the WAL checkpointed, the file's growth divided by the events;
- restart time with 100,000 stored tasks: a file filled with 100,000 ended tasks (and their
  logs) by direct SQL, then ``python -m scoped_a2a serve --store sqlite:FILE`` timed from its
  start until it answers its agent card, next to the same start on an empty file.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ..core import Bench, Metric, Scenario
from ..systems import System, free_port
from .redis_store import SERVERS, _Relabel, _sizes
from .send import Send
from .stream import Stream

MEMORY, SQLITE, NORMAL = "scoped-a2a memory", "scoped-a2a sqlite", "scoped-a2a sqlite-normal"
STORED_TASKS = 100_000
SMALL_EVENTS = 5_000


class SQLiteStore(Scenario):
    name = "sqlite"
    number = 17
    title = "the SQLite store next to the memory store (send c=64, stream c=16, disk, restart)"
    metrics = (
        Metric("rps_c64", "send req/s c=64", "req/s", "higher", True, "{:.0f}"),
        Metric("p50_c64", "send p50 ms c=64", "ms", "lower", True, "{:.2f}"),
        Metric("p50_c1", "send p50 ms c=1", "ms", "lower", True, "{:.2f}"),
        Metric("ttfe_p50", "first event p50 ms", "ms", "lower", True, "{:.2f}"),
        Metric("events_per_s_c16", "events/s c=16", "events/s", "higher", True, "{:.0f}"),
        Metric("bytes_per_event", "disk bytes/small event", "bytes", None, False, "{:.0f}"),
        Metric("restart_s", "restart s, 100k tasks", "s", None, False, "{:.2f}"),
        Metric("start_empty_s", "start s, empty file", "s", None, False, "{:.2f}"),
    )
    notes = ("The rows are scoped-a2a on the same server, run back to back; ratio lines read "
             "sqlite/memory (>1: SQLite ahead). 'sqlite' commits with synchronous=FULL (an "
             "fsync per commit; concurrent writes share one commit), 'sqlite-normal' with "
             "?synchronous=normal (no fsync: survives a killed process, not a power loss). "
             "Restart: process start to its first answer, with 100,000 ended tasks in the file "
             "vs an empty file.")

    async def run(self, bench: Bench) -> None:
        for server in SERVERS:
            await self.measure(bench, System("scoped", server), MEMORY, None)
            for label, query in ((SQLITE, ""), (NORMAL, "?synchronous=normal")):
                path = bench.workdir / f"sqlite-{server}-{uuid.uuid4().hex[:6]}.db"
                system = System("scoped", server, ("--store", f"sqlite:{path}{query}"))
                await self.measure(bench, system, label, path)
        server = SERVERS[0]
        per_event = await asyncio.to_thread(_bytes_per_event, bench.workdir)
        bench.record(SQLITE, server, "bytes_per_event", per_event, "bytes", role="subject")
        bench.progress(f"sqlite {per_event:.0f} bytes on disk per small event")
        full = bench.workdir / "sqlite-100k.db"
        await asyncio.to_thread(_fill, full, STORED_TASKS)
        empty = bench.workdir / "sqlite-empty.db"
        for metric, path in (("start_empty_s", empty), ("restart_s", full)):
            took = await _time_to_serving(bench, path)
            if took is None:
                bench.fail(f"{SQLITE}: serve --store sqlite:{path.name} did not answer")
                continue
            bench.record(SQLITE, server, metric, took, "s", role="subject")
            bench.progress(f"sqlite {metric} {took:.2f}s")

    async def measure(self, bench: Bench, system: System, label: str,
                      path: Path | None) -> dict[str, float]:
        """Send and stream figures of one system, recorded under ``label``; returned too."""
        relabel = _Relabel(bench, f"{label} / {system.server}", label.split()[-1],
                           _sizes(bench))
        # The ratio lines read sqlite (full) / memory; the normal row is shown, not ratioed.
        role = "ceiling" if path is None else "control" if label == NORMAL else "subject"
        async with bench.servers([system]) as running:
            proc = running.get(system)
            if proc is None:
                return {}
            await Send().measure(relabel, system, proc)  # type: ignore[arg-type]
            await Stream().measure(relabel, system, proc)  # type: ignore[arg-type]
        for metric in self.metrics:
            value = relabel.figures.get(metric.key)
            if value is not None:
                bench.record(label, system.server, metric.key, value, metric.unit, role=role)
        return relabel.figures


def _bytes_per_event(workdir: Path) -> float:
    """The file's growth per small trajectory event appended through the store."""
    import anyio

    from scoped_a2a.protocol.trajectory import TrajectoryEvent
    from scoped_a2a.protocol.types import Task, TaskState, TaskStatus
    from scoped_a2a.store.sqlite import open_sqlite_store

    path = workdir / f"sqlite-events-{uuid.uuid4().hex[:6]}.db"

    async def fill() -> float:
        async with open_sqlite_store(path) as store:
            await store.writer.call(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
            base = path.stat().st_size
            task = Task(id=uuid.uuid4().hex, context_id="c",
                        status=TaskStatus(state=TaskState.WORKING))
            await store.create(task)

            async def one(i: int) -> None:
                await store.append(task.id, TrajectoryEvent(
                    task_id=task.id, context_id="c", data={"type": "tick", "i": i}))

            for start in range(0, SMALL_EVENTS, 500):  # concurrently: batched commits
                async with anyio.create_task_group() as tg:
                    for i in range(start, start + 500):
                        tg.start_soon(one, i)
            await store.writer.call(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
            return (path.stat().st_size - base) / SMALL_EVENTS

    return anyio.run(fill)


def _fill(path: Path, n: int) -> None:
    """A store file holding ``n`` ended tasks, each with a three-event log, by direct SQL."""
    from scoped_a2a.store.sqlite.schema import open_database

    db = open_database(path)
    try:
        conn = db.writer
        conn.execute("BEGIN")
        tasks, events = [], []
        for seq in range(1, n + 1):
            task_id = uuid.uuid4().hex
            snap = json.dumps({
                "id": task_id, "contextId": "c", "status": {
                    "state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00.000Z"},
                "history": [{"messageId": task_id, "role": "ROLE_USER",
                             "parts": [{"text": "hello"}]}],
                "artifacts": [{"artifactId": "a", "parts": [{"text": "hello"}]}]}).encode()
            tasks.append((seq, task_id, "", "c", "TASK_STATE_COMPLETED",
                          "2026-01-01T00:00:00.000Z", 3, snap, time.time(), len(snap) * 2, 3))
            for pos, kind in ((1, ord("s")), (2, ord("a")), (3, ord("s"))):
                events.append((seq, pos, kind, b'{"taskId":"' + task_id.encode() + b'"}'))
        conn.executemany("INSERT INTO tasks (seq, id, owner, context_id, state, ts, last, snap, "
                         "ended_at, size, snap_pos) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         tasks)
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", events)
        conn.execute("COMMIT")
    finally:
        db.close()


async def _time_to_serving(bench: Bench, path: Path, timeout: float = 60.0,
                           store: tuple[str, ...] = ()) -> float | None:
    """Seconds from starting ``serve --store sqlite:PATH`` (or the ``store`` arguments) until
    it answers its agent card."""
    port = free_port()
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scoped_a2a", "serve", "--port", str(port), "--log-level",
         "WARNING", "--max-ended-tasks", str(STORED_TASKS * 2),
         *(store or ("--store", f"sqlite:{path}"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        while time.monotonic() - start < timeout:
            if proc.poll() is not None:
                return None
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.01)
                continue
            writer.write(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: b\r\n"
                         b"Connection: close\r\n\r\n")
            head = await reader.readline()
            writer.close()
            if b" 200 " in head:
                return time.monotonic() - start
            await asyncio.sleep(0.01)
        return None
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 15)
        except subprocess.TimeoutExpired:
            proc.kill()
