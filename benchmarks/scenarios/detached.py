"""Scenario 7: a thousand CRM system events whose callers hang up at random points.

Each event is a blocking ``SendMessage`` whose metadata (``evoai_crm_event: inactivity_action``)
the scoped-a2a servers are told to detach (``--detach-metadata evoai_crm_event=inactivity_action``);
its agent works for 100 ms in ten steps and then signals ``done``. Each caller hangs up after a
random delay between 0 and 100 ms (64 callers at a time), the way a CRM's background job fires
and forgets. Completed = the agents that signalled ``done``; it must be all of them. Where the
server can list tasks, the recorded COMPLETED tasks are counted too.

The control row sends the same events to scoped-a2a with a metadata value the rule does not match:
those runs are interactive, so the hang-ups cancel them, which is the failure the rule prevents.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

from ..core import Bench, Metric, Scenario
from ..loadgen import RequestTemplate, connect, http_request, rpc_body
from ..systems import DETACH_RULE, FASTA2A, SCOPED, SDK, ServerProcess, System

AGENT_SECONDS = 0.1
IN_FLIGHT = 64
RULE_KEY, RULE_VALUE = DETACH_RULE.split("=")


class Detached(Scenario):
    name = "detached"
    number = 7
    title = "detached completion (system events, callers hang up at random points)"
    metrics = (
        Metric("completed", "completed", "fraction", None, False, "{:.1%}"),
        Metric("canceled", "canceled", "fraction", None, False, "{:.1%}"),
        Metric("recorded_completed", "recorded COMPLETED", "fraction", None, False, "{:.1%}"),
        Metric("drain_s", "s from last hang-up to last done", "s", None, False, "{:.2f}"),
    )
    notes = ("scoped-a2a serves with --detach-metadata " + DETACH_RULE + "; the control row sends "
             "a value the rule does not match. fasta2a has no ListTasks; its SendMessage never "
             "waits for the agent, so hang-ups cannot touch its runs.")

    def systems(self) -> list[System]:
        return [*SCOPED, *SDK, *FASTA2A]

    async def run(self, bench: Bench) -> None:
        async with bench.servers(self.systems(), detach_rule=DETACH_RULE) as running:
            for n, (system, proc) in enumerate(running.items()):
                await self.measure(bench, system, proc, f"d{n}", RULE_VALUE)
                if system == SCOPED[0]:
                    await self.measure(bench, system, proc, f"d{n}x", "chat_message",
                                       control=True)

    async def measure(self, bench: Bench, system: System, proc: ServerProcess, prefix: str,
                      value: str, *, control: bool = False) -> None:
        total = bench.sizes.events
        rng = random.Random(7)
        context = f"ctx-{prefix}"
        templates = [RequestTemplate(proc.port, "SendMessage",
                                     f"event {prefix}-{i} {AGENT_SECONDS}",
                                     metadata={RULE_KEY: value}, context_id=context)
                     for i in range(total)]
        delays = [rng.uniform(0.0, AGENT_SECONDS) for _ in range(total)]
        next_event = iter(range(total))
        last_hangup = 0.0

        async def caller() -> None:
            nonlocal last_hangup
            for i in next_event:
                conn = await connect(proc.port)
                try:
                    conn.send(templates[i].make(i), lambda status, body: None)
                    await asyncio.sleep(delays[i])
                finally:
                    conn.close()
                last_hangup = time.monotonic()

        async with asyncio.TaskGroup() as tg:
            for _ in range(IN_FLIGHT):
                tg.create_task(caller())
        deadline = time.monotonic() + 10 + total * AGENT_SECONDS / IN_FLIGHT
        while time.monotonic() < deadline:
            ended = (len(bench.signals.keys("done", prefix + "-"))
                     + len(bench.signals.keys("cancel", prefix + "-")))
            if ended >= total:
                break
            await asyncio.sleep(0.05)
        done_keys = bench.signals.keys("done", prefix + "-")
        done = len(done_keys)
        canceled = len(bench.signals.keys("cancel", prefix + "-"))
        last_done = max((bench.signals.stamps[("done", k)] for k in done_keys), default=None)
        label = system if not control else "scoped-a2a, event the rule does not match"
        role = "control" if control else None
        backend = system.server
        bench.record(label, backend, "completed", done / total, "fraction", role=role)
        bench.record(label, backend, "canceled", canceled / total, "fraction", role=role)
        if last_done is not None:
            bench.record(label, backend, "drain_s", max(0.0, last_done - last_hangup), "s",
                         role=role)
        recorded = await _count_completed(proc, context)
        if recorded is None:
            bench.record(label, backend, "recorded_completed", None, "fraction", role=role,
                         note="n/a")
        else:
            bench.record(label, backend, "recorded_completed", recorded / total, "fraction",
                         role=role)
        name = label if isinstance(label, str) else label.label
        bench.progress(f"{name:32} {done}/{total} completed, {canceled} canceled"
                       + (f", {recorded} recorded COMPLETED" if recorded is not None else ""))
        if system.is_subject and not control and (done < total or (recorded or 0) < total):
            bench.fail(f"{system.label}: only {done} of {total} detached events completed "
                       f"({recorded} recorded)")


async def _count_completed(proc: ServerProcess, context: str) -> int | None:
    """COMPLETED tasks in ``context`` by ListTasks, or None if the server has no ListTasks."""
    body = rpc_body("ListTasks", {"contextId": context, "status": "TASK_STATE_COMPLETED",
                                  "pageSize": 1})
    async with await connect(proc.port) as conn:
        _, answer = await conn.request(http_request(proc.port, body))
    try:
        result = json.loads(answer)["result"]
    except (ValueError, KeyError, TypeError):
        return None  # an error answer: no ListTasks here
    return int(result.get("totalSize", 0))  # an encoder may leave a zero out
