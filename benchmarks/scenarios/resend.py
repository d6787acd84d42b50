"""Scenario 16: exactly-once sends. A retrying fire-and-forget sender, and what the check costs.

**Runs per accepted event.** A CRM's background job sends each system event with
``returnImmediately`` and, when the connection drops before the answer arrives, resends it after a
short backoff (5 ms doubling, jittered, at most 8 attempts), until it has an answer. Between it and
the server runs a proxy (:class:`CutAnswers`, in this process) that cuts 10 % of the send answers:
the server has accepted the send and written its answer, and the sender gets half of it and a
closed connection. Each event is ``event KEY 0.1`` (its agent signals ``done`` on the side channel
when its run ends); runs = the ``done`` signals that came in, counting a key that ran twice twice.
Where the server lists tasks, the tasks in the events' context are counted too. Target on
scoped-a2a: exactly 1.000 run per accepted event. The sender resends the same ``messageId``; the
control row is scoped-a2a under a sender that makes a new ``messageId`` for every attempt (what a
naive client does), to show it is the same-id resend *and* the server's dedupe that give
exactly-once.

**What the check costs.** Blocking echo sends per second (adapters' closed loops, 16 callers) of
scoped-a2a's ``serve`` with unique ``messageId``s (each send claims its id) beside the same
command with claims off (``benchmarks/peers/scoped_noclaims.py``: the memory store's claim methods
are the base class's no-ops; the fingerprint is still taken), alternated, best of three rounds.
On a shared machine that difference is within the noise, so the same pair is measured in-process
too (``benchmarks.claimcost``: CPU per send of two apps in one process, claims on and off, in
alternated batches; the share is the median over batch pairs of (on - off) / on), and the check
itself (fingerprint and claim) is timed alone, a lower bound. Target: the check costs at most
5 % of a send.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import anyio

from scoped_a2a.testing import FaultyProxy

from ..core import Bench, Metric, Scenario
from ..loadgen import ConnectionClosed, RequestTemplate, connect, http_request, rpc_body
from ..systems import REPO, SCOPED, ServerProcess, System, server_env
from .adapters import throughput

AGENT_SECONDS = 0.1
IN_FLIGHT = 32
CUT_RATE = 0.10
ATTEMPTS = 8
BACKOFF, BACKOFF_CAP = 0.005, 0.2
ANSWER_TIMEOUT = 10.0
SEND_METHODS = frozenset({"SendMessage", "message/send"})
NEW_ID = "scoped-a2a, new messageId per resend"
CLAIMS_OFF = "scoped-a2a, claims off"
INPROC = "in-process (benchmarks.claimcost)"
HYPERCORN = SCOPED[:2]
RETRY_SYSTEMS = (*HYPERCORN, System("sdk", "uvicorn"), System("fasta2a", "uvicorn"))


@dataclass(frozen=True, slots=True)
class NoClaims(System):
    """scoped-a2a's ``serve`` with message claims switched off (a bench peer script)."""

    @property
    def name(self) -> str:
        return CLAIMS_OFF

    def argv(self, python: str, port: int, *, detach_rule: str | None = None) -> list[str]:
        backend = self.server.removeprefix("hypercorn-")
        return [python, "-m", "benchmarks.peers.scoped_noclaims", "--agent",
                "benchmarks.agents:bench_agent", "--backend", backend, "--port", str(port),
                "--grace", "1", "--log-level", "WARNING"]


class CutAnswers(FaultyProxy):
    """Forwards every request; cuts the answer of ``rate`` of the sends halfway through (the
    server accepted the send and answered; the sender gets a broken answer and a closed line)."""

    def __init__(self, upstream_port: int, rate: float, seed: int) -> None:
        super().__init__(upstream_port, "close", methods=())
        self.rate = rate
        self.cuts = 0
        self._cut_rng = random.Random(seed)

    async def _action(self, method: str | None, task_id: str | None) -> str:
        if method in SEND_METHODS and self._cut_rng.random() < self.rate:
            self.cuts += 1
            return "cut"
        return "forward"


class Resend(Scenario):
    name = "resend"
    number = 16
    title = "exactly-once sends: a retrying sender through a proxy that cuts 10% of answers"
    metrics = (
        Metric("events", "events", "count", None, False, "{:.0f}"),
        Metric("cut", "answers cut", "count", None, False, "{:.0f}"),
        Metric("runs", "runs", "count", None, False, "{:.0f}"),
        Metric("runs_per_event", "runs per accepted event", "ratio", "lower", False, "{:.3f}"),
        Metric("ran_twice", "events run more than once", "count", None, False, "{:.0f}"),
        Metric("tasks_per_event", "tasks per event (ListTasks)", "ratio", None, False, "{:.3f}"),
        Metric("rps_on", "sends/s c=16, claims on", "req/s", "higher", False, "{:.0f}"),
        Metric("rps_off", "sends/s c=16, claims off", "req/s", "higher", False, "{:.0f}"),
        Metric("rps_cost", "check's share of sends/s", "fraction", None, False, "{:.1%}"),
        Metric("us_on", "µs CPU/send, claims on", "µs", "lower", False, "{:.0f}"),
        Metric("us_off", "µs CPU/send, claims off", "µs", "lower", False, "{:.0f}"),
        Metric("us_share", "check's share of a send's CPU", "fraction", None, False,
               "{:.1%}"),
        Metric("us_check", "µs CPU of the check alone", "µs", "lower", False, "{:.2f}"),
    )
    tables = (
        ("a retrying fire-and-forget sender, 10% of send answers cut after the server accepted "
         "the send", ("events", "cut", "runs", "runs_per_event", "ran_twice", "tasks_per_event")),
        ("the cost of the check (claims on: unique messageIds, each send claims its id)",
         ("rps_on", "rps_off", "rps_cost", "us_on", "us_off", "us_share", "us_check")),
    )
    pairs: ClassVar[Mapping[str, str]] = {}
    notes = ("Runs counted from the agents' done signals on the side channel (a run that ran "
             "twice signals twice); tasks from ListTasks in the events' context (fasta2a has no "
             "ListTasks). a2a-sdk and fasta2a do not dedupe sends: each resend is a new task and "
             "a new run. The cost rows: sends/s best of the rounds, claims on and off "
             "alternated (on a loaded machine their difference is noise); in-process, the "
             "median CPU per send over alternated batches, the check's share the median over "
             "batch pairs of (on - off) / on (run against itself it came out within ±2.5%), "
             "and the check (fingerprint and claim) timed alone, a lower bound.")

    async def run(self, bench: Bench) -> None:
        async with bench.servers(RETRY_SYSTEMS) as running:
            for n, (system, proc) in enumerate(running.items()):
                await self.retrying(bench, system, proc, f"r{n}", same_id=True)
                if system == HYPERCORN[0]:
                    await self.retrying(bench, system, proc, f"r{n}x", same_id=False)
        await self.cost(bench)

    # --- runs per accepted event -------------------------------------------------------------

    async def retrying(self, bench: Bench, system: System, proc: ServerProcess, prefix: str,
                       *, same_id: bool) -> None:
        total = bench.sizes.events
        context = f"ctx-{prefix}"
        proxy = CutAnswers(proc.port, CUT_RATE, seed=16)
        rng = random.Random(16)
        templates: list[RequestTemplate] = []
        accepted = failed = 0
        next_event = iter(range(total))

        async def sender(port: int) -> None:
            nonlocal accepted, failed
            for i in next_event:
                for attempt in range(ATTEMPTS):
                    # The same request bytes (the same messageId) every time, unless the
                    # naive sender's control: a new id per attempt.
                    raw = templates[i].make(i if same_id else i + attempt * 10**7)
                    try:
                        async with await connect(port) as conn:
                            async with asyncio.timeout(ANSWER_TIMEOUT):
                                status, body = await conn.request(raw)
                    except (ConnectionClosed, OSError, TimeoutError):
                        delay = min(BACKOFF * 2 ** attempt, BACKOFF_CAP)
                        await asyncio.sleep(delay * rng.uniform(0.5, 1.0))
                        continue
                    if status == 200 and b'"result"' in body:
                        accepted += 1
                    else:
                        failed += 1
                        bench.progress(f"{system.label}: {status} {body[:200]!r}")
                    break
                else:
                    failed += 1

        done_before = dict(bench.signals.repeats)
        async with anyio.create_task_group() as tg:
            port: int = await tg.start(proxy.serve)
            templates = [RequestTemplate(port, "SendMessage",
                                         f"event {prefix}-{i} {AGENT_SECONDS}",
                                         return_immediately=True, context_id=context)
                         for i in range(total)]
            try:
                async with asyncio.TaskGroup() as senders:
                    for _ in range(IN_FLIGHT):
                        senders.create_task(sender(port))
            finally:
                proxy.vanish()
        keys = [f"{prefix}-{i}" for i in range(total)]
        deadline = time.monotonic() + 10 + total * AGENT_SECONDS / IN_FLIGHT
        while (time.monotonic() < deadline
               and len(bench.signals.keys("done", prefix + "-")) < accepted):
            await asyncio.sleep(0.05)
        await asyncio.sleep(3 * AGENT_SECONDS)  # a resend's run, started last, ends too
        counts = [bench.signals.repeats.get(("done", k), 0) - done_before.get(("done", k), 0)
                  for k in keys]
        runs, twice = sum(counts), sum(1 for c in counts if c > 1)
        tasks = await _count_tasks(proc, context)
        label: System | str = system if same_id else NEW_ID
        role = None if same_id else "control"
        backend = system.server
        bench.record(label, backend, "events", accepted, "count", role=role)
        bench.record(label, backend, "cut", proxy.cuts, "count", role=role)
        bench.record(label, backend, "runs", runs, "count", role=role)
        bench.record(label, backend, "runs_per_event", runs / max(accepted, 1), "ratio",
                     role=role)
        bench.record(label, backend, "ran_twice", twice, "count", role=role)
        bench.record(label, backend, "tasks_per_event",
                     None if tasks is None else tasks / max(accepted, 1), "ratio", role=role,
                     note="n/a" if tasks is None else None)
        name = system.label if same_id else f"{NEW_ID} / {backend}"
        bench.progress(f"{name:44} {accepted}/{total} accepted, {proxy.cuts} cut, {runs} runs "
                       f"({runs / max(accepted, 1):.3f}/event, {twice} more than once)"
                       + (f", {tasks} tasks" if tasks is not None else ""))
        if failed:
            bench.fail(f"{name}: {failed} of {total} events got no answer")
        if system.is_subject and same_id and (runs != accepted or (tasks or accepted) != accepted):
            bench.fail(f"{name}: {runs} runs and {tasks} tasks for {accepted} accepted events "
                       "(exactly one each wanted)")

    # --- the cost of the check ---------------------------------------------------------------

    async def cost(self, bench: Bench) -> None:
        rounds = 1 if bench.sizes.quick else 3
        pairs = [(on, NoClaims("scoped", on.server)) for on in HYPERCORN]
        async with bench.servers([s for pair in pairs for s in pair]) as running:
            best: dict[System, float] = {}
            for _ in range(rounds):
                for pair in pairs:
                    for system in pair:
                        proc = running.get(system)
                        if proc is None:
                            continue
                        template = RequestTemplate(proc.port, "SendMessage", "echo hello")
                        rate = await throughput(bench, system, proc, template)
                        if rate is not None:
                            best[system] = max(best.get(system, 0.0), rate[0])
        for on, off in pairs:
            if on in best and off in best:
                bench.record(on, None, "rps_on", best[on], "req/s")
                bench.record(on, None, "rps_off", best[off], "req/s")
                bench.record(on, None, "rps_cost", 1 - best[on] / best[off], "fraction")
        batches, batch = (2, 400) if bench.sizes.quick else (20, 1000)
        for on in HYPERCORN:
            backend = on.server.removeprefix("hypercorn-")
            cpu = await _claimcost(bench, backend, batches, batch)
            if cpu is None:
                continue
            # No server here: the row's server column names the event loop alone.
            bench.record(INPROC, backend, "us_on", cpu["on"], "µs", role="control")
            bench.record(INPROC, backend, "us_off", cpu["off"], "µs", role="control")
            bench.record(INPROC, backend, "us_share", cpu["share"], "fraction", role="control")
            bench.record(INPROC, backend, "us_check", cpu["check"], "µs", role="control")
            bench.progress(f"in-process {backend:8} {cpu['on']:.0f} µs/send claims on, "
                           f"{cpu['off']:.0f} off, the check's share {cpu['share']:.1%}; the "
                           f"check alone {cpu['check']:.2f} µs")


async def _claimcost(bench: Bench, backend: str, batches: int, batch: int
                     ) -> dict[str, float] | None:
    """``benchmarks.claimcost``'s figures (µs of CPU per send), in a process of its own."""
    argv = [bench.python, "-m", "benchmarks.claimcost", "--backend", backend, "--batches",
            str(batches), "--batch", str(batch)]
    out = await asyncio.to_thread(subprocess.run, argv, cwd=REPO, capture_output=True, text=True,
                                  timeout=600, env=server_env(bench.signal_port, bench.workdir))
    words = out.stdout.split()
    if out.returncode != 0 or len(words) != 8:
        bench.fail(f"benchmarks.claimcost --backend {backend}: {out.stderr[-300:]}")
        return None
    return {words[i]: float(words[i + 1]) for i in range(0, 8, 2)}


async def _count_tasks(proc: ServerProcess, context: str) -> int | None:
    """Tasks in ``context`` by ListTasks, or None if the server has no ListTasks."""
    body = rpc_body("ListTasks", {"contextId": context, "pageSize": 1})
    async with await connect(proc.port) as conn:
        _, answer = await conn.request(http_request(proc.port, body))
    try:
        result = json.loads(answer)["result"]
    except (ValueError, KeyError, TypeError):
        return None
    return int(result.get("totalSize", 0))
