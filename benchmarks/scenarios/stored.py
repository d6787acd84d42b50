"""Scenario 13: what stored (ended) tasks cost: memory per event, and throughput as they pile up.

**memory**: a fresh server takes N detached runs (``returnImmediately``) of the ``chatter`` agent,
each emitting 30 small status updates (``working`` with a short message) and 30 small trajectory
events, sent in waves of ``WAVE`` (the next wave once ListTasks counts the last one completed, so
the figure is what ended tasks hold, not a backlog of running ones). Reported: the server's RSS
growth from just before the first run to after the last has ended, per stored event (the 60 the
agent emitted; the task's own start and end events ride along) and per ended task. Target:
<= 256 B per small event.

**steady**: blocking SendMessage to the echo agent at c=64, in three rounds of R sends each on a
fresh server, while its store fills to its ended-task cap and beyond (full size: 3 x 5,000 sends
against the default cap of 10,000; quick: 3 x 500 against a cap of 1,000). Reported: each round's
sends per second and round 3 over round 1 (target >= 0.95). The rows "GC tuning off" are the same
server started with ``--no-gc-tuning`` (the server's own ``gc.freeze()`` after start-up and
higher thresholds left out), where the server supports the flag.

**PostgreSQL** (rows "scoped-a2a postgres", hypercorn trio, when Debian's PostgreSQL binaries
are installed: the tests' launcher ``tests/postgres/server.py``, a fresh database per part):
the same two parts with ``--store postgresql://...``. The RSS figures say what the serving
process keeps of tasks the database stores (the disk's bytes per event are scenario 19's);
the rounds, the sends per second while retention sweeps the ended tasks past the cap.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from ..core import Bench, Metric, Scenario
from ..loadgen import Conn, RequestTemplate, connect, connect_many, http_request, rpc_body
from ..systems import SCOPED, ServerProcess, System

STATUSES = TRAJECTORY = 30
WAVE = 200
CONCURRENCY = 64
ROUNDS = 3
MARK = b"TASK_STATE_COMPLETED"
GC_OFF = ("--no-gc-tuning",)
POSTGRES = "scoped-a2a postgres"


class Stored(Scenario):
    name = "stored"
    number = 13
    title = "stored tasks (memory per stored event; throughput while the store fills)"
    metrics = (
        Metric("tasks", "ended tasks", "count", None, False, "{:.0f}"),
        Metric("events", "stored events", "count", None, False, "{:.0f}"),
        Metric("rss_before", "RSS before MiB", "MiB", None, False, "{:.0f}"),
        Metric("rss_added", "RSS added MiB", "MiB", "lower", False, "{:.1f}"),
        Metric("per_event", "RSS B per event", "B", "lower", False, "{:.0f}"),
        Metric("per_task", "RSS KiB per ended task", "KiB", "lower", False, "{:.2f}"),
        *(Metric(f"rps_r{r}", f"req/s round {r}", "req/s", "higher", False, "{:.0f}")
          for r in range(1, ROUNDS + 1)),
        Metric("steady", f"round {ROUNDS} / round 1", "ratio", "higher", False, "{:.2f}"),
    )
    tables = (
        ("memory held by ended tasks (chatter agent: 30 status + 30 trajectory events each)",
         ("tasks", "events", "rss_before", "rss_added", "per_event", "per_task")),
        ("blocking sends at c=64 while the store fills to its cap and beyond",
         (*(f"rps_r{r}" for r in range(1, ROUNDS + 1)), "steady")),
    )
    notes = ("Targets: <= 256 B of RSS per stored small event; round 3 >= 0.95x round 1. "
             "RSS is the server's VmRSS; rounds are counted in sends, not seconds.")

    async def run(self, bench: Bench) -> None:
        quick = bench.sizes.quick
        tasks = 300 if quick else 5000
        async with bench.servers(SCOPED) as running:
            for n, (system, proc) in enumerate(running.items()):
                await self.memory(bench, system, proc, tasks, f"st{n}")
        cap = 1000 if quick else 10_000
        per_round = cap // 2
        systems = [System(s.kind, s.server, ("--max-ended-tasks", str(cap))) for s in SCOPED]
        gc_off = [System(s.kind, s.server, (*s.options, *GC_OFF)) for s in systems]
        async with bench.servers([*systems, *gc_off]) as running:
            for system, proc in running.items():
                await self.steady(bench, system, proc, per_round, control=system in gc_off)
        await self.postgres(bench, tasks, cap, per_round)

    async def postgres(self, bench: Bench, tasks: int, cap: int, per_round: int) -> None:
        """Both parts again on hypercorn trio with the PostgreSQL store (module docstring)."""
        from tests.postgres.server import bin_dir, new_server

        if not bench.wants(System("scoped", "hypercorn-trio").label):  # as servers() filters
            return
        if bin_dir() is None:
            bench.fail(f"{POSTGRES}: PostgreSQL is not installed (scripts/install-system-deps)")
            return
        server = await asyncio.to_thread(new_server)
        key = str(bench.workdir / "pg-stored.key")
        os.environ["SCOPED_A2A_POSTGRES_KEY_FILE"] = key
        try:
            url = await asyncio.to_thread(server.database)
            held = System("scoped", "hypercorn-trio", ("--store", url))
            async with bench.servers([held]) as running:
                for system, proc in running.items():
                    await self.memory(bench, system, proc, tasks, "pg", label=POSTGRES)
            url = await asyncio.to_thread(server.database)
            capped = System("scoped", "hypercorn-trio",
                            ("--store", url, "--max-ended-tasks", str(cap)))
            async with bench.servers([capped]) as running:
                for system, proc in running.items():
                    await self.steady(bench, system, proc, per_round, control=False,
                                      name=POSTGRES)
        finally:
            os.environ.pop("SCOPED_A2A_POSTGRES_KEY_FILE", None)
            await asyncio.to_thread(server.destroy)

    async def memory(self, bench: Bench, system: System, proc: ServerProcess, tasks: int,
                     key: str, *, label: str | None = None) -> None:
        """RSS per stored event of ``system`` (``label``: the row's name, else the system's)."""
        warm_ctx, ctx = f"{key}-warm", f"{key}-ctx"
        if not await _chatter(bench, proc, warm_ctx, 50):
            return
        await asyncio.sleep(0.5)
        before = proc.rss()
        if not await _chatter(bench, proc, ctx, tasks):
            return
        await asyncio.sleep(1.0)
        after = proc.rss()
        kept = await _count(proc, ctx, None)
        if kept != tasks:
            bench.fail(f"{system.label}: {kept} of {tasks} ended tasks still stored")
        events = tasks * (STATUSES + TRAJECTORY)
        added = max(0, after - before)
        for metric, value, unit in (
            ("tasks", tasks, "count"), ("events", events, "count"),
            ("rss_before", before / (1 << 20), "MiB"), ("rss_added", added / (1 << 20), "MiB"),
            ("per_event", added / events, "B"), ("per_task", added / tasks / 1024, "KiB"),
        ):
            if label is None:
                bench.record(system, None, metric, value, unit)
            else:
                bench.record(label, system.server, metric, value, unit, role="subject")
        bench.progress(f"{label or system.label:32} {tasks} tasks, {events} events: RSS "
                       f"{before / (1 << 20):.0f} MiB + {added / (1 << 20):.1f} MiB = "
                       f"{added / events:.0f} B per event, {added / tasks / 1024:.2f} KiB per task")

    async def steady(self, bench: Bench, system: System, proc: ServerProcess, per_round: int,
                     *, control: bool, name: str | None = None) -> None:
        """Sends per second in rounds while the store fills (``name``: the row's, else the
        system's label)."""
        label: System | str = system
        if control:
            label = "scoped-a2a, GC tuning off"
        elif name is not None:
            label = name
        template = RequestTemplate(proc.port, "SendMessage", "echo hello")
        conns = await connect_many(proc.port, CONCURRENCY)
        try:
            await _round(conns, template, 200, 0, proc.port)  # warm-up
            rates = []
            for r in range(ROUNDS):
                elapsed, errors = await _round(conns, template, per_round, (r + 1) * 10**7,
                                               proc.port)
                if errors:
                    bench.fail(f"{system.label}: {errors} wrong answers in round {r + 1}")
                rates.append(per_round / elapsed)
        finally:
            for c in conns:
                c.close()
        role = "control" if control else ("subject" if name is not None else None)
        for r, rate in enumerate(rates, 1):
            bench.record(label, system.server, f"rps_r{r}", rate, "req/s", role=role)
        bench.record(label, system.server, "steady", rates[-1] / rates[0], "ratio", role=role)
        name = label if isinstance(label, str) else label.label
        bench.progress(f"{name:32} {system.server:18} rounds of {per_round}: "
                       + " ".join(f"{x:.0f}" for x in rates)
                       + f" req/s, last/first {rates[-1] / rates[0]:.2f}")


async def _round(conns: list[Conn], template: RequestTemplate, total: int, seq: int,
                 port: int) -> tuple[float, int]:
    """``total`` blocking sends over ``conns`` in closed loops; (seconds taken, wrong answers).

    A connection the server closes (hypercorn ends keep-alive after 1,000 requests) is replaced.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    state = {"sent": 0, "answered": 0, "errors": 0}
    pending: set[asyncio.Task[None]] = set()

    def send(i: int) -> None:
        if state["sent"] >= total:
            return
        state["sent"] += 1
        conn = conns[i]

        def on_done(status: int, body: bytes) -> None:
            state["answered"] += 1
            if status != 200 or MARK not in body:
                state["errors"] += 1
            if state["answered"] >= total:
                if not done.done():
                    done.set_result(None)
            elif status < 0 or conn.will_close:
                task = loop.create_task(reconnect(i))
                pending.add(task)
                task.add_done_callback(pending.discard)
            else:
                send(i)

        conn.send(template.make(seq + state["sent"]), on_done)

    async def reconnect(i: int) -> None:
        conns[i].close()
        conns[i] = await connect(port)
        send(i)

    start = time.perf_counter()
    for i in range(len(conns)):
        send(i)
    async with asyncio.timeout(120 + total / 50):
        await done
    return time.perf_counter() - start, state["errors"]


async def _chatter(bench: Bench, proc: ServerProcess, context: str, tasks: int) -> bool:
    """Start ``tasks`` detached chatter runs in ``context``, ``WAVE`` at a time; wait until all
    have completed (ListTasks). False (and a failure) if they do not."""
    template = RequestTemplate(proc.port, "SendMessage", f"chatter {STATUSES} {TRAJECTORY}",
                               return_immediately=True, context_id=context)
    conns = await connect_many(proc.port, 16)
    try:
        sent = 0
        while sent < tasks:
            wave = min(WAVE, tasks - sent)
            batch = list(range(sent, sent + wave))

            async def one(conn: Conn, items: list[int]) -> None:
                for i in items:
                    status, _ = await conn.request(template.make(i))
                    if status != 200:
                        raise RuntimeError(f"send answered {status}")

            async with asyncio.TaskGroup() as tg:
                for k, conn in enumerate(conns):
                    tg.create_task(one(conn, batch[k::len(conns)]))
            sent += wave
            deadline = time.monotonic() + 60
            while await _count(proc, context, "TASK_STATE_COMPLETED") < sent:
                if time.monotonic() > deadline:
                    bench.fail(f"{proc.system.label}: chatter runs did not complete")
                    return False
                await asyncio.sleep(0.02)
    finally:
        for c in conns:
            c.close()
    return True


async def _count(proc: ServerProcess, context: str, status: str | None) -> int:
    """Tasks in ``context`` (in ``status``) by ListTasks' totalSize."""
    params: dict[str, object] = {"contextId": context, "pageSize": 1}
    if status is not None:
        params["status"] = status
    async with await connect(proc.port) as conn:
        _, answer = await conn.request(http_request(proc.port, rpc_body("ListTasks", params)))
    return int(json.loads(answer)["result"].get("totalSize", 0))
