"""Scenario 4: follower teardown. A step against an agent that breaks its follower's reads.

A step sends one turn to a scoped-a2a agent behind a fault-injecting proxy
(``benchmarks/peers/fault_proxy.py``, on ``scoped_a2a.testing``) while a follower reads the
turn's live trajectory. Two
agents: one that closes every follower read's connection, and one that answers while the turn
runs and is gone (closes every read) once it has ended, like the agent of the original incident.
The step then ends three ways: it is cancelled mid-turn, its body raises after the turn, or its
body returns. Figures: the longest time any run took from that moment to the step's end, and the
most failed reads any run made after its turn had ended, counted at the agent.

The clients are processes of their own on Python 3.11: scoped-a2a's ``Step`` on asyncio and on
trio, and the old asyncio pattern it replaces (``benchmarks/oldstep.py``). A step still running
``cap`` seconds after it was told to end is "hung"; the old pattern is given up on after a few
hung runs.
"""

from __future__ import annotations

from typing import Any

from ..clients import CLIENTS, ClientSystem, find_python311, run_client
from ..core import Bench, Metric, Scenario
from ..systems import ServerProcess, System, server_env

FAULTS = {"close": "agent closes every follower read", "gone": "agent gone once the turn ended"}
ENDINGS = ("cancelled", "raises", "returns")


def _metrics() -> tuple[Metric, ...]:
    out = []
    for fault in FAULTS:
        for ending in ENDINGS:
            out += [Metric(f"{fault}_{ending}_ms", f"{fault}/{ending} ms", "ms", "lower",
                           True, "{:.1f}"),
                    Metric(f"{fault}_{ending}_reads", f"{fault}/{ending} reads", "reads",
                           None, False, "{:.0f}")]
    return tuple(out)


class Teardown(Scenario):
    name = "teardown"
    number = 4
    title = "follower teardown (a step against an agent that breaks its follower's reads)"
    metrics = _metrics()
    tables = tuple((title, [m.key for m in _metrics() if m.key.startswith(fault + "_")])
                   for fault, title in FAULTS.items())
    notes = ("'ms': the longest any run took from being cancelled / raising / returning to the "
             "step's end. 'reads': the most failed reads any run's follower made after its turn "
             "had ended (counted at the agent, up to the step's end or the cap). 'hung': the "
             "step had not ended the cap after it was told to; the old pattern's follower then "
             "retries every 0.2 s for good.")

    async def run(self, bench: Bench) -> None:
        python = find_python311(bench.python311)
        if python is None:
            bench.fail("no Python 3.11 found (give --py311 PATH): the baseline needs it")
            return
        faulty = [System("faulty", "hypercorn-asyncio", ("--fault", fault)) for fault in FAULTS]
        async with bench.servers(faulty) as running:
            for system, proc in running.items():
                fault = system.options[1]
                for client in CLIENTS:
                    if bench.wants(f"{client.name} / {client.backend}"):
                        await self.measure(bench, python, proc, client, fault)

    async def measure(self, bench: Bench, python: str, proc: ServerProcess, client: ClientSystem,
                      fault: str) -> None:
        sizes = bench.sizes
        cap = sizes.teardown_cap
        env = server_env(bench.signal_port, bench.workdir)
        try:
            records = await run_client(
                python, env, client, proc.url,
                ["--cap", str(cap), "--work", str(sizes.teardown_work), "teardown", "--ending",
                 ",".join(ENDINGS), "--runs", str(sizes.follower_runs), "--give-up",
                 str(sizes.give_up)],
                timeout=len(ENDINGS) * sizes.follower_runs * (cap + sizes.teardown_work + 3) + 60)
        except RuntimeError as exc:
            bench.fail(str(exc))
            return
        for ending in ENDINGS:
            self.report(bench, client, fault, ending,
                        [r for r in records if "run" in r and r["ending"] == ending])

    def report(self, bench: Bench, client: ClientSystem, fault: str, ending: str,
               runs: list[dict[str, Any]]) -> None:
        cap = bench.sizes.teardown_cap
        if not runs:
            bench.fail(f"{client.name} ({client.backend}) {fault}/{ending}: no run finished")
            return
        hung = [r for r in runs if r["hung"]]
        reads = max(self.failed_reads(bench, r, cap) for r in runs)
        name, backend, role = client.name, client.backend, client.role
        if hung:
            note = f"hung {len(hung)}/{len(runs)}"
            bench.record(name, backend, f"{fault}_{ending}_ms", None, "ms", role=role, note=note)
        else:
            worst = max(r["end"] - r["t0"] for r in runs) * 1e3
            bench.record(name, backend, f"{fault}_{ending}_ms", worst, "ms", role=role)
        bench.record(name, backend, f"{fault}_{ending}_reads", reads, "reads", role=role)
        shown = f"hung in {len(hung)} of {len(runs)} runs" if hung else \
            f"ended within {max(r['end'] - r['t0'] for r in runs) * 1e3:.1f} ms"
        bench.progress(f"{name} ({backend}) {fault:5} {ending:9}: {shown}; at most {reads} "
                       f"failed reads after the turn ended")
        if client.role == "subject" and (hung or reads > 1):
            bench.fail(f"{client.name} ({client.backend}) {fault}/{ending}: "
                       f"{len(hung)} hung runs, {reads} failed reads after the turn ended")

    @staticmethod
    def failed_reads(bench: Bench, run: dict[str, object], cap: float) -> int:
        """Faulted follower reads of the run's task after its turn ended, at the agent."""
        task_id, turn_end = run.get("task_id"), run.get("turn_end")
        if not isinstance(task_id, str) or not isinstance(turn_end, float):
            return 0
        end = run.get("end")
        until = end if isinstance(end, float) else turn_end + cap
        return sum(1 for key in bench.signals.keys("fault", task_id + "-")
                   if turn_end < bench.signals.stamps[("fault", key)] <= until)
