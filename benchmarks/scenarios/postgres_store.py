"""Scenario 19: the PostgreSQL store next to the memory store (send, stream, bytes, start-up).

scoped-a2a runs twice on each server (hypercorn trio, hypercorn asyncio, uvicorn): with its
in-memory store, then with ``--store postgresql://...`` against a PostgreSQL this scenario
starts on a free loopback port (Debian's ``postgresql`` binaries, the tests' launcher
``tests/postgres/server.py``; ``fsync=on``, so each commit reaches the disk), a fresh database
per run; back to back, so the ratio postgres/memory per server is what to read. A full run
measures each twice, in the order memory, PostgreSQL, PostgreSQL, memory, and records the
means (:meth:`PostgresStore.side_by_side` says why); ``--quick`` once each. The send and
stream figures come from scenarios 1 and 2's own measurements, relabelled as scenario 14 does
for Redis.

Once per run: bytes per stored small event (the growth of the events table and its index per
trajectory event appended through the store) and start-up time to serving with 100,000 ended
tasks in the schema (filled by direct SQL) next to an empty one.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from ..core import Bench, Metric, Scenario
from ..systems import System
from .postgres_replicas import cross_replica
from .redis_store import SERVERS, _Relabel, _sizes
from .send import Send
from .sqlite_store import STORED_TASKS, _time_to_serving
from .stream import Stream

MEMORY, POSTGRES = "scoped-a2a memory", "scoped-a2a postgres"
SDK_POSTGRES = "a2a-sdk postgres"
SMALL_EVENTS = 5_000


class PostgresStore(Scenario):
    name = "postgres"
    number = 19
    title = "the PostgreSQL store next to the memory store (send c=64, stream c=16, start-up)"
    metrics = (
        Metric("rps_c64", "send req/s c=64", "req/s", "higher", True, "{:.0f}"),
        Metric("p50_c64", "send p50 ms c=64", "ms", "lower", True, "{:.2f}"),
        Metric("p50_c1", "send p50 ms c=1", "ms", "lower", True, "{:.2f}"),
        Metric("ttfe_p50", "first event p50 ms", "ms", "lower", True, "{:.2f}"),
        Metric("events_per_s_c16", "events/s c=16", "events/s", "higher", True, "{:.0f}"),
        Metric("cpu_us_per_send", "server CPU µs/send c=64", "µs", "lower", False, "{:.0f}"),
        Metric("cpu_us_per_event", "server CPU µs/event c=16", "µs", "lower", False,
               "{:.0f}"),
        Metric("bytes_per_event", "bytes/small event", "bytes", None, False, "{:.0f}"),
        Metric("restart_s", "start s, 100k tasks (10k --quick)", "s", None, False, "{:.2f}"),
        Metric("start_empty_s", "start s, empty schema", "s", None, False, "{:.2f}"),
        Metric("xreplica_p50", "A to B p50 ms", "ms", "lower", False, "{:.2f}"),
        Metric("xreplica_p99", "A to B p99 ms", "ms", "lower", False, "{:.2f}"),
    )
    notes = ("The rows are scoped-a2a on the same server, run back to back (a full run: each "
             "twice, memory, postgres, postgres, memory, and the mean); ratio lines read "
             "postgres/memory (>1: PostgreSQL ahead). PostgreSQL 15 on loopback with fsync=on; "
             "every event is one transaction (a task's create and end wait for the WAL "
             "flush). Start-up: process start to its first answer, with 100,000 ended tasks "
             "(10,000 with --quick) in the schema vs an empty one.")

    async def run(self, bench: Bench) -> None:
        from tests.postgres.server import bin_dir, new_server

        if bin_dir() is None:
            bench.fail(f"{POSTGRES}: PostgreSQL is not installed (scripts/install-system-deps)")
            return
        # Its own temporary directory: the postgres user must reach it (the work directory
        # is the benchmark user's alone).
        server = await asyncio.to_thread(new_server)
        key = str(bench.workdir / "pg-push.key")
        os.environ["SCOPED_A2A_POSTGRES_KEY_FILE"] = key  # the servers' (uvicorn's too)
        try:
            # --quick (CI's 110 s budget, on a loaded 2-core machine): the two hypercorn
            # backends only.
            for name in SERVERS[:2] if bench.sizes.quick else SERVERS:
                await self.side_by_side(bench, name, server)
            # The official a2a-sdk with its PostgreSQL task store (DatabaseTaskStore on
            # SQLAlchemy asyncio + asyncpg) on the same server, next to ours on uvicorn.
            url = await asyncio.to_thread(server.database)
            try:
                await self.measure(bench, System("sdk", "uvicorn", ("--task-store", url)),
                                   SDK_POSTGRES, False, role="peer")
            except Exception as exc:  # the peer failing is a row missing, not our figures
                bench.fail(f"{SDK_POSTGRES}: {exc!r}"[:300])
            url = await asyncio.to_thread(server.database)
            delivery = await cross_replica(bench, url, 50 if bench.sizes.quick else 200)
            if delivery is not None:
                for metric, value in zip(("xreplica_p50", "xreplica_p99"), delivery,
                                         strict=True):
                    bench.record(POSTGRES, "two replicas", metric, value, "ms",
                                 role="subject")
                bench.progress(f"postgres cross-replica delivery p50 {delivery[0]:.2f} ms "
                               f"p99 {delivery[1]:.2f} ms")
            name = SERVERS[0]
            url = await asyncio.to_thread(server.database)
            per_event = await asyncio.to_thread(_bytes_per_event, url, key)
            bench.record(POSTGRES, name, "bytes_per_event", per_event, "bytes", role="subject")
            bench.progress(f"postgres {per_event:.0f} bytes per small event")
            full = await asyncio.to_thread(server.database)
            stored = 10_000 if bench.sizes.quick else STORED_TASKS  # --quick: CI's budget
            await asyncio.to_thread(_fill, full, key, stored)
            bench.progress(f"postgres {stored} ended tasks stored")
            empty = await asyncio.to_thread(server.database)
            for metric, db in (("start_empty_s", empty), ("restart_s", full)):
                store = ("--store", db, "--postgres-key-file", key)
                took = await _time_to_serving(bench, Path(), store=store)
                if took is None:
                    bench.fail(f"{POSTGRES}: serve --store postgresql:// did not answer")
                    continue
                bench.record(POSTGRES, name, metric, took, "s", role="subject")
                bench.progress(f"postgres {metric} {took:.2f}s")
        finally:
            os.environ.pop("SCOPED_A2A_POSTGRES_KEY_FILE", None)
            await asyncio.to_thread(server.destroy)

    async def side_by_side(self, bench: Bench, name: str, server: Any) -> None:
        """The memory store and PostgreSQL on server ``name``, recorded as the mean of each
        one's runs. A full run takes them in the order memory, PostgreSQL, PostgreSQL,
        memory (each a fresh process; each PostgreSQL run a fresh database): the machine's
        speed drifts from minute to minute (the memory store's rate moved by a third
        between runs a few minutes apart here), and the mirrored order cancels a steady
        drift out of the ratio. ``--quick`` runs each once."""
        order = (MEMORY, POSTGRES) if bench.sizes.quick else (MEMORY, POSTGRES, POSTGRES,
                                                               MEMORY)
        runs: dict[str, list[dict[str, float]]] = {MEMORY: [], POSTGRES: []}
        for label in order:
            args: tuple[str, ...] = ()
            if label == POSTGRES:
                args = ("--store", await asyncio.to_thread(server.database))
            figures = await self.measure_once(bench, System("scoped", name, args), label)
            if figures:
                runs[label].append(figures)
        for label, subject in ((MEMORY, False), (POSTGRES, True)):
            if runs[label]:
                self.record(bench, label, name, _mean(runs[label]), subject)
        if len(runs[MEMORY]) == len(runs[POSTGRES]) == 2:
            # Each mirrored pair's ratio, so the run says how far its two halves agree.
            for key in ("rps_c64", "events_per_s_c16"):
                pairs = [p.get(key, 0) / m[key] for p, m in zip(runs[POSTGRES], runs[MEMORY],
                                                                  strict=True) if m.get(key)]
                bench.progress(f"postgres/memory {key} on {name}, per pair: "
                               + ", ".join(f"{r:.2f}" for r in pairs))

    async def measure(self, bench: Bench, system: System, label: str,
                      subject: bool, role: str = "ceiling") -> dict[str, float]:
        """Send and stream figures of one system, recorded under ``label``; returned too."""
        figures = await self.measure_once(bench, system, label)
        self.record(bench, label, system.server, figures, subject, role)
        return figures

    async def measure_once(self, bench: Bench, system: System, label: str
                           ) -> dict[str, float]:
        """Send and stream figures of one run of ``system`` (a process of its own)."""
        relabel = _Relabel(bench, f"{label} / {system.server}", label.split()[-1],
                           _sizes(bench))
        async with bench.servers([system]) as running:
            proc = running.get(system)
            if proc is None:
                return {}
            await Send().measure(relabel, system, proc)  # type: ignore[arg-type]
            await Stream().measure(relabel, system, proc)  # type: ignore[arg-type]
        # The server process's CPU per send and per stream event (its cores over the
        # window, over the window's rate): what a store costs the process, load aside.
        for key, cpu, rate in (("cpu_us_per_send", "server_cpu_c64", "rps_c64"),
                               ("cpu_us_per_event", "server_cpu_c16", "events_per_s_c16")):
            if relabel.figures.get(rate) and cpu in relabel.figures:
                relabel.figures[key] = relabel.figures[cpu] / relabel.figures[rate] * 1e6
        return relabel.figures

    def record(self, bench: Bench, label: str, server: str, figures: dict[str, float],
               subject: bool, role: str = "ceiling") -> None:
        for metric in self.metrics:
            value = figures.get(metric.key)
            if value is not None:
                bench.record(label, server, metric.key, value, metric.unit,
                             role="subject" if subject else role)


def _mean(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's mean over the runs that have it."""
    keys = {k for run in runs for k in run}
    return {k: sum(vs) / len(vs) for k in keys if (vs := [r[k] for r in runs if k in r])}


def _size(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_total_relation_size('scoped_a2a.events')").fetchone()
        return int(row[0]) if row else 0


def _bytes_per_event(url: str, key: str) -> float:
    """The events table's growth (with its index) per small trajectory event appended."""
    import anyio

    from scoped_a2a.protocol.trajectory import TrajectoryEvent
    from scoped_a2a.protocol.types import Task, TaskState, TaskStatus
    from scoped_a2a.store.postgres import open_postgres_store

    async def fill() -> float:
        async with open_postgres_store(url, key_file=key) as store:
            base = await anyio.to_thread.run_sync(_size, url)
            task = Task(id=uuid.uuid4().hex, context_id="c",
                        status=TaskStatus(state=TaskState.WORKING))
            await store.create(task)

            async def one(i: int) -> None:
                await store.append(task.id, TrajectoryEvent(
                    task_id=task.id, context_id="c", data={"type": "tick", "i": i}))

            for start in range(0, SMALL_EVENTS, 100):
                async with anyio.create_task_group() as tg:
                    for i in range(start, start + 100):
                        tg.start_soon(one, i)
            return (await anyio.to_thread.run_sync(_size, url) - base) / SMALL_EVENTS

    return anyio.run(fill)


def _fill(url: str, key: str, n: int) -> None:
    """A schema holding ``n`` ended tasks, each with a three-event log, by direct SQL."""
    import anyio
    import psycopg

    from scoped_a2a.store.postgres import open_postgres_store

    async def create() -> None:
        async with open_postgres_store(url, key_file=key):
            pass

    anyio.run(create)  # the schema, as the store creates it
    snap = json.dumps({"id": "x", "contextId": "c", "status": {
        "state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00.000Z"},
        "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hello"}]}]})
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO scoped_a2a.tasks (id, owner, context_id, state, ts, last, snap, "
            "ended_at, size) SELECT md5(i::text), '', 'c', 'TASK_STATE_COMPLETED', "
            "'2026-01-01T00:00:00.000Z', 3, convert_to(%s, 'UTF8'), i, 600 "
            "FROM generate_series(1, %s) i", (snap, n))
        conn.execute(
            "INSERT INTO scoped_a2a.events SELECT t.seq, p, 115, convert_to('{}', 'UTF8') "
            "FROM scoped_a2a.tasks t, generate_series(1, 3) p")


