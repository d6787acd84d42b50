"""Scenario 6: soak. Thousands of steps and runs with faults at random points; what is left after.

The agent is scoped-a2a on hypercorn trio behind the fault-injecting proxy in ``random`` mode:
every task's follower reads start failing at a random moment (mid-turn or after it), and any
request at all may be closed, answered 500 or cut mid-answer. Against it, for each client system,
a step-runner process runs steps 16 at a time, each cancelled at a random point, raising or
returning; meanwhile the generator fires interactive runs (blocking sends) whose callers hang up
at random points. Figures, before and after: the client process's tasks, file descriptors and
memory, and the server's file descriptors, memory and unfinished tasks. A step still running
``cap`` seconds after it was told to end is abandoned (and counted as hung).
"""

from __future__ import annotations

import asyncio
import json
import random

from ..clients import CLIENTS, ClientSystem, find_python311, run_client
from ..core import Bench, Metric, Scenario
from ..loadgen import RequestTemplate, connect, http_request, rpc_body
from ..systems import ServerProcess, System, server_env

CONCURRENCY = 16
WORK = 0.2
FAULT_RATE = "0.03"
OPEN_STATES = ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")


class Soak(Scenario):
    name = "soak"
    number = 6
    title = "soak (steps and runs with faults at random points; what is left after)"
    metrics = (
        Metric("count", "steps / runs", "count", None, False, "{:.0f}"),
        Metric("hung", "hung steps", "count", "lower", False, "{:.0f}"),
        Metric("tasks_before", "tasks before", "count", None, False, "{:.0f}"),
        Metric("tasks_after", "tasks after", "count", "lower", False, "{:.0f}"),
        Metric("fds_before", "fds before", "count", None, False, "{:.0f}"),
        Metric("fds_after", "fds after", "count", "lower", False, "{:.0f}"),
        Metric("rss_before", "MiB before", "MiB", None, False, "{:.1f}"),
        Metric("rss_after", "MiB after", "MiB", "lower", False, "{:.1f}"),
        Metric("reads_after_stop", "failed reads after stop", "reads", None, False, "{:.0f}"),
    )
    notes = ("client rows: the step-runner process ('tasks': asyncio tasks, or trio tasks "
             "including trio's own, besides the runner's); the server row: the scoped-a2a "
             "server under all the soaks ('tasks': tasks left submitted or working).")

    async def run(self, bench: Bench) -> None:
        python = find_python311(bench.python311)
        if python is None:
            bench.fail("no Python 3.11 found (give --py311 PATH): the baseline needs it")
            return
        agent = System("faulty", "hypercorn-trio", ("--fault", "random", "--fault-rate",
                                                    FAULT_RATE))
        async with bench.servers([agent]) as running:
            if agent not in running:
                return
            proc = running[agent]
            fds0, rss0 = _fds(proc.pid), proc.rss()
            runs = 0
            for n, client in enumerate(CLIENTS):
                if not bench.wants(f"{client.name} / {client.backend}"):
                    continue
                async with asyncio.TaskGroup() as tg:
                    fired = tg.create_task(self.fire_runs(proc, f"s{n}", bench.sizes.soak_runs))
                    await self.soak(bench, python, proc, client)
                runs += fired.result()
            unfinished = await _unfinished(proc)
            await asyncio.sleep(1.0)  # connections the clients just dropped finish closing
            label, backend = "scoped-a2a server (faulty agent)", "hypercorn-trio"
            bench.record(label, backend, "count", runs, "count", role="control")
            bench.record(label, backend, "tasks_after", unfinished, "count", role="control",
                         note=None if unfinished is not None else "n/a")
            bench.record(label, backend, "fds_before", fds0, "count", role="control")
            bench.record(label, backend, "fds_after", _fds(proc.pid), "count", role="control")
            bench.record(label, backend, "rss_before", rss0 / 2**20, "MiB", role="control")
            bench.record(label, backend, "rss_after", proc.rss() / 2**20, "MiB", role="control")
            bench.progress(f"server: {runs} runs fired; {unfinished} tasks left unfinished; fds "
                           f"{fds0} -> {_fds(proc.pid)}; RSS {rss0 / 2**20:.1f} -> "
                           f"{proc.rss() / 2**20:.1f} MiB")
            if unfinished:
                bench.fail(f"the server has {unfinished} unfinished tasks after the soak")

    async def soak(self, bench: Bench, python: str, proc: ServerProcess,
                   client: ClientSystem) -> None:
        sizes = bench.sizes
        env = server_env(bench.signal_port, bench.workdir)
        try:
            records = await run_client(
                python, env, client, proc.url,
                ["--cap", str(sizes.soak_cap), "--work", str(WORK), "soak", "--steps",
                 str(sizes.soak_steps), "--concurrency", str(CONCURRENCY)],
                timeout=sizes.soak_steps * (WORK + sizes.soak_cap + 1) / CONCURRENCY + 120)
        except RuntimeError as exc:
            bench.fail(str(exc))
            return
        before = next(r for r in records if r.get("before"))
        totals = next(r for r in records if r.get("soak"))
        after = next(r for r in records if r.get("summary"))
        name, backend, role = client.name, client.backend, client.role
        figures = {"count": totals["steps"], "hung": totals["hung"],
                   "tasks_before": before["tasks_alive"], "tasks_after": after["tasks_alive"],
                   "fds_before": before["fds"], "fds_after": after["fds"],
                   "rss_before": before["rss"] / 2**20, "rss_after": after["rss"] / 2**20,
                   "reads_after_stop": totals["failed_after_stop"]}
        for metric, value in figures.items():
            bench.record(name, backend, metric, value, "MiB" if "rss" in metric else "count",
                         role=role)
        bench.progress(f"{name} ({backend}): {totals['steps']} steps, {totals['hung']} hung; "
                       f"tasks {before['tasks_alive']} -> {after['tasks_alive']}, fds "
                       f"{before['fds']} -> {after['fds']}, RSS {before['rss'] / 2**20:.1f} -> "
                       f"{after['rss'] / 2**20:.1f} MiB")
        if role == "subject" and (totals["hung"] or after["tasks_alive"] > before["tasks_alive"]):
            bench.fail(f"{name} ({backend}): {totals['hung']} hung steps, tasks "
                       f"{before['tasks_alive']} -> {after['tasks_alive']}")

    async def fire_runs(self, proc: ServerProcess, prefix: str, total: int) -> int:
        """Interactive runs whose callers hang up at random points; returns how many were sent."""
        rng = random.Random(61)
        template = RequestTemplate(proc.port, "SendMessage", f"event {prefix} 0.1",
                                   metadata={"evoai_crm_event": "chat_message"})
        next_run = iter(range(total))
        sent = 0

        async def caller() -> None:
            nonlocal sent
            for i in next_run:
                try:
                    conn = await connect(proc.port)
                except OSError:
                    continue
                try:
                    conn.send(template.make(i), lambda status, body: None)
                    sent += 1
                    await asyncio.sleep(rng.uniform(0.0, 0.15))
                finally:
                    conn.close()

        async with asyncio.TaskGroup() as tg:
            for _ in range(CONCURRENCY):
                tg.create_task(caller())
        return sent


def _fds(pid: int) -> int:
    import os

    return len(os.listdir(f"/proc/{pid}/fd"))


async def _unfinished(proc: ServerProcess) -> int | None:
    """Tasks still submitted or working, once runs have had time to end (None: unknown)."""
    left: int | None = None
    for _ in range(40):  # up to ~10 s for cancelled runs to record their ends
        counts = []
        for state in OPEN_STATES:
            counts.append(await _count(proc, state))
        if all(c is not None for c in counts):
            left = sum(c for c in counts if c is not None)
            if left == 0:
                return 0
        await asyncio.sleep(0.25)
    return left


async def _count(proc: ServerProcess, state: str) -> int | None:
    body = rpc_body("ListTasks", {"status": state, "pageSize": 1})
    for _ in range(5):  # the proxy fails some requests on purpose
        try:
            async with await connect(proc.port) as conn, asyncio.timeout(5):
                status, answer = await conn.request(http_request(proc.port, body))
            if status == 200:
                return int(json.loads(answer)["result"].get("totalSize", 0))
        except (OSError, ValueError, KeyError, TimeoutError, ConnectionError):
            pass
    return None
