"""Scenario 15: agents written for other frameworks, on their own servers and on scoped-a2a.

Five pairs, side by side in one run, every server on hypercorn's asyncio worker:

- **an a2a-sdk ``AgentExecutor``**: the a2a-sdk peer's ``BenchExecutor``, the same class on
  a2a-sdk's own server (``benchmarks/peers/sdk_server.py``) and on scoped-a2a (``serve --agent``
  given the executor, adapted by ``from_executor``: ``benchmarks/peers/sdk_executor_scoped.py``).
  Figures: blocking ``SendMessage`` echoes per second (20 callers, closed loop), and hang-up to
  run cancelled (the executor's ``slow`` command signals ``start`` and, when cancelled,
  ``cancel`` on the side channel, as in scenario 3; a2a-sdk never cancels on a hang-up: "never").
- **a pydantic-ai ``Agent``** whose model is an OpenAI-compatible endpoint: a fake one
  (``scoped_a2a.testing.fake_llm``) that this process runs on loopback, so every run makes a
  real HTTP model call. Served by fasta2a (``agent_to_a2a``'s ``AgentWorker``) and by scoped-a2a
  (``serve --agent`` given the bare agent, adapted by ``from_pydantic_ai``):
  ``benchmarks/peers/pydantic_ai_peer.py``. Figures: blocking sends per second (fasta2a's send
  does not wait for the agent: n/a) and streamed runs per second (20 callers each); hang-ups
  (:func:`model_hangups`: the fake streams a long reply a token every 10 ms; a stream is hung up
  once three tokens are out): the tokens the model sent after the hang-up (target 0), the model
  calls still open when the reply would have ended, and the time from the hang-up to the model's
  connection closed (p99, target <= 25 ms); detached
  runs completed after hang-ups (scoped-a2a serves with ``--detach-metadata``; each caller sends
  a blocking ``SendMessage`` carrying the rule's metadata and hangs up after 0-50 ms while the
  model call, about 100 ms, runs; completed = ListTasks' COMPLETED count; target 100%).

- **Strands, BeeAI and CrewAI** (a2a-sdk 0.3: an environment of their own), each on its own
  server and on scoped-a2a, in a child process in that environment
  (:mod:`benchmarks.scenarios.adapters03`); skipped, and said so, without one.

The fake model runs in this process, so its work is the load generator's too (the figures per
second are lower than a remote model's would allow for both systems alike).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from scoped_a2a.testing.fake_llm import FakeChatModel, fake_chat_model

from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import Loop, RequestTemplate, connect, connect_many, http_request, rpc_body
from ..systems import DETACH_RULE, ServerProcess, System
from .hangup import Hangup
from .send import _drive, check

CALLERS = 20
HOLD_KEY = "hold-"
HOLD_CHUNKS = [f"t{i} " for i in range(100)]
"""What the fake model says to a message carrying HOLD_KEY (the hang-up part), a token every
HANGUP_DELAY seconds."""
HANGUP_DELAY = 0.01
HUNG_UP_AT = 3
"""A hang-up comes once the model has sent this many tokens."""
REPLY_CHUNKS = ["A", " short", " answer", "."]
DETACHED_DELAY = 0.025
"""Seconds between the fake's reply chunks in the detached part (a model call of ~100 ms)."""
HANGUP_AFTER = 0.05
"""A detached part's caller hangs up after a random 0 to this many seconds."""
RULE_KEY, RULE_VALUE = DETACH_RULE.split("=")
PROBE_ID, DETACHED_IDS, CONTROL_IDS, HOLD_IDS = (k * 10**9 for k in (9, 8, 7, 6))
"""Message id counters of each part: a server may take a repeated message id for a resend."""

SDK_SELF = "a2a-sdk (its own server)"
SDK_SCOPED = "scoped-a2a (from_executor)"
AI_FASTA2A = "fasta2a (agent_to_a2a)"
AI_SCOPED = "scoped-a2a (from_pydantic_ai)"
AI_CONTROL = "scoped-a2a (from_pydantic_ai), metadata the rule does not match"
FRAMEWORKS = {"strands": "Strands", "beeai": "BeeAI", "crewai": "CrewAI"}
"""The a2a-sdk 0.3 frameworks (run by :mod:`.adapters03` in their own environment)."""


def native_title(framework: str) -> str:
    return f"{FRAMEWORKS[framework]} (its own server)"


def scoped_title(framework: str) -> str:
    return f"scoped-a2a ({FRAMEWORKS[framework]}'s agent)"


CREWAI_COPY = "CrewAI (its helpers, a copy of the agent per request)"
"""CrewAI's helpers as a user who needs concurrent callers serves them (its one-agent server
refuses a second run while one runs): sends/s like for like with scoped-a2a's."""
FRAMEWORK_PAIRS = {**{native_title(f): scoped_title(f) for f in FRAMEWORKS},
                   CREWAI_COPY: scoped_title("crewai")}


@dataclass(frozen=True, slots=True)
class Served(System):
    """One framework's agent on one server: a peer script, or scoped-a2a's ``serve --agent``."""

    title: str = ""
    target: str = ""
    """The peer script's module (``python -m``), or scoped-a2a's ``--agent MODULE:ATTR``."""

    @property
    def name(self) -> str:
        return self.title

    def argv(self, python: str, port: int, *, detach_rule: str | None = None) -> list[str]:
        p = str(port)
        if self.kind == "scoped":
            rule = ["--detach-metadata", detach_rule] if detach_rule else []
            return [python, "-m", "scoped_a2a", "serve", "--agent", self.target, "--backend",
                    "asyncio", "--port", p, "--grace", "1", "--log-level", "WARNING", *rule]
        return [python, "-m", self.target, "--port", p, "--server", self.server, *self.options]


SERVER = "hypercorn-asyncio"
SYSTEMS = (
    Served("sdk", SERVER, title=SDK_SELF, target="benchmarks.peers.sdk_server"),
    Served("scoped", SERVER, title=SDK_SCOPED,
           target="benchmarks.peers.sdk_executor_scoped:executor"),
    Served("fasta2a", SERVER, title=AI_FASTA2A, target="benchmarks.peers.pydantic_ai_peer"),
    Served("scoped", SERVER, title=AI_SCOPED, target="benchmarks.peers.pydantic_ai_peer:assistant"),
)
EXECUTORS = (SDK_SELF, SDK_SCOPED)


class Adapters(Scenario):
    name = "adapters"
    number = 15
    title = "agents of other frameworks, on their own server and on scoped-a2a"
    min_budget = 420.0
    """The a2a-sdk 0.3 part starts six framework servers (each imports its framework)."""
    metrics = (
        Metric("sdk_rps", f"sends/s c={CALLERS}", "req/s", "higher", True, "{:.0f}"),
        Metric("sdk_p99", f"send p99 ms c={CALLERS}", "ms", "lower", False, "{:.1f}"),
        Metric("send_p50", "hang-up→cancel p50 ms", "ms", "lower", False, "{:.2f}"),
        Metric("send_p99", "hang-up→cancel p99 ms", "ms", "lower", True, "{:.2f}"),
        Metric("send_cancelled", "runs cancelled", "fraction", None, False, "{:.0%}"),
        Metric("ai_send_rps", f"sends/s c={CALLERS}", "req/s", "higher", False, "{:.0f}"),
        Metric("ai_stream_rps", f"streamed runs/s c={CALLERS}", "req/s", "higher", True,
               "{:.0f}"),
        Metric("hangups", "hang-ups", "count", None, False, "{:.0f}"),
        Metric("tokens_after", "tokens after a hang-up (max)", "tokens", "lower", False,
               "{:.0f}"),
        Metric("open_after", "model calls left to finish", "count", None, False, "{:.0f}"),
        Metric("closed_p99", "hang-up→model call closed p99 ms", "ms", "lower", True, "{:.1f}"),
        Metric("detached_completed", "detached runs completed", "fraction", None, False,
               "{:.0%}"),
        Metric("detached_canceled", "canceled", "fraction", None, False, "{:.0%}"),
        Metric("fw_rps", f"sends/s c={CALLERS}", "req/s", "higher", True, "{:.1f}"),
        Metric("fw_failed", "sends failed", "fraction", "lower", False, "{:.0%}"),
        Metric("fw_hangups", "hang-ups", "count", None, False, "{:.0f}"),
        Metric("fw_tokens_after", "tokens after a hang-up (max)", "tokens", "lower", False,
               "{:.0f}"),
        Metric("fw_open_after", "model calls left to finish", "count", None, False, "{:.0f}"),
        Metric("fw_closed_p99", "hang-up→model call closed p99 ms", "ms", "lower", True,
               "{:.1f}"),
    )
    tables = (
        ("an a2a-sdk AgentExecutor (the a2a-sdk peer's BenchExecutor)",
         ("sdk_rps", "sdk_p99", "send_p50", "send_p99", "send_cancelled")),
        ("a pydantic-ai Agent, its model a fake OpenAI-compatible endpoint on loopback",
         ("ai_send_rps", "ai_stream_rps", "hangups", "tokens_after", "open_after", "closed_p99",
          "detached_completed", "detached_canceled")),
        ("Strands, BeeAI and CrewAI agents (a2a-sdk 0.3, their own environment), the same fake "
         "model", ("fw_rps", "fw_failed", "fw_hangups", "fw_tokens_after", "fw_open_after",
                   "fw_closed_p99")),
    )
    pairs: ClassVar[Mapping[str, str]] = {SDK_SELF: SDK_SCOPED, AI_FASTA2A: AI_SCOPED,
                                          **FRAMEWORK_PAIRS}
    notes = ("All on hypercorn's asyncio worker. Hang-ups: a blocking SendMessage for the "
             "executors, a SendStreamingMessage for the pydantic-ai agents (fasta2a's SendMessage "
             "does not wait for the agent, so it is n/a for sends/s, and a hang-up can only be "
             "tried on its stream); 'never': no run cancelled / no model call closed by the "
             "server. Detached: scoped-a2a serves with --detach-metadata " + DETACH_RULE + " (the "
             "control row's metadata does not match it: those runs are interactive and the "
             "hang-ups cancel them); fasta2a's runs never wait, each caller reads its "
             "'submitted' answer, hangs up, and the task is read back with GetTask (fasta2a has "
             "no ListTasks). Strands, BeeAI, CrewAI: 0.3's message/send and message/stream, "
             "each framework's agent on the server it ships (CrewAI's: its execute/cancel "
             "helpers on a2a-sdk's server, one agent as CrewAI's helpers take it, and with a copy "
             "of the agent per request) and on serve --agent, in the a2a-sdk 0.3 "
             "environment's Python; a hang-up comes once the model has sent 3 tokens of 100, "
             "one every 10 ms. The fake model runs in the load generator's process.")

    async def run(self, bench: Bench) -> None:
        async with fake_chat_model(_respond) as fake:
            (bench.workdir / "model-url").write_text(fake.url)
            async with bench.servers(SYSTEMS, detach_rule=DETACH_RULE) as running:
                for n, (system, proc) in enumerate(running.items()):
                    if system.name in EXECUTORS:
                        await self.executor(bench, system, proc, f"a{n}")
                    else:
                        await self.pydantic_ai(bench, system, proc, fake, f"a{n}")
        from .adapters03 import run_in_sdk03_environment

        await run_in_sdk03_environment(bench)

    # --- the a2a-sdk executor ---------------------------------------------------------------

    async def executor(self, bench: Bench, system: System, proc: ServerProcess, prefix: str
                       ) -> None:
        template = RequestTemplate(proc.port, "SendMessage", "echo hello")
        rate = await throughput(bench, system, proc, template)
        if rate is not None:
            bench.record(system, None, "sdk_rps", rate[0], "req/s")
            bench.record(system, None, "sdk_p99", rate[1], "ms")
        await Hangup().measure(bench, system, proc, "send", prefix)

    # --- the pydantic-ai agent ---------------------------------------------------------------

    async def pydantic_ai(self, bench: Bench, system: System, proc: ServerProcess,
                          fake: FakeChatModel, prefix: str) -> None:
        fake.hold, fake.delay = False, 0.0
        if system.kind == "fasta2a":
            bench.record(system, None, "ai_send_rps", None, "req/s", note="does not wait")
        else:
            rate = await throughput(bench, system, proc,
                                    RequestTemplate(proc.port, "SendMessage", "hello"),
                                    slow=True)
            if rate is not None:
                bench.record(system, None, "ai_send_rps", rate[0], "req/s")
        rate = await throughput(bench, system, proc, RequestTemplate(
            proc.port, "SendStreamingMessage", "hello", stream=True), what="streams", slow=True)
        if rate is not None:
            bench.record(system, None, "ai_stream_rps", rate[0], "req/s")
        fake.delay = DETACHED_DELAY
        await self.detached(bench, system, proc, prefix, RULE_VALUE)
        if system.kind == "scoped":
            await self.detached(bench, system, proc, prefix + "x", "chat_message",
                                control=True)
        await model_hangups(bench, system, proc, fake, prefix, lambda key, i: RequestTemplate(
            proc.port, "SendStreamingMessage", key, stream=True).make(HOLD_IDS + i))

    async def detached(self, bench: Bench, system: System, proc: ServerProcess, prefix: str,
                       value: str, *, control: bool = False) -> None:
        total = 10 if bench.sizes.quick else 100
        rng = random.Random(15)
        context = f"ctx-{prefix}"
        template = RequestTemplate(proc.port, "SendMessage", f"event {prefix}",
                                   metadata={RULE_KEY: value}, context_id=context)
        delays = [rng.uniform(0.0, HANGUP_AFTER) for _ in range(total)]
        ids = CONTROL_IDS if control else DETACHED_IDS
        waits_answer = system.kind == "fasta2a"
        next_event = iter(range(total))
        task_ids: list[str] = []

        async def caller() -> None:
            for i in next_event:
                conn = await connect(proc.port)
                try:
                    if waits_answer:  # its send never waits: the answer is the 'submitted' task
                        _, body = await conn.request(template.make(ids + i))
                        task_ids.append(json.loads(body)["result"]["task"]["id"])
                    else:
                        conn.send(template.make(ids + i), lambda status, body: None)
                        await asyncio.sleep(delays[i])
                finally:
                    conn.close()

        async with asyncio.TaskGroup() as tg:
            for _ in range(CALLERS):
                tg.create_task(caller())
        deadline = time.monotonic() + 10 + total * 0.2 / CALLERS
        done = canceled = 0
        while time.monotonic() < deadline:
            if waits_answer:
                states = [await _task_state(proc, t) for t in task_ids]
                done = states.count("TASK_STATE_COMPLETED")
                canceled = states.count("TASK_STATE_CANCELED")
            else:
                done = await _count(proc, context, "TASK_STATE_COMPLETED")
                canceled = await _count(proc, context, "TASK_STATE_CANCELED")
            if done + canceled >= total:
                break
            await asyncio.sleep(0.1)
        label: System | str = AI_CONTROL if control else system
        role = "control" if control else None
        bench.record(label, SERVER, "detached_completed", done / total, "fraction", role=role)
        bench.record(label, SERVER, "detached_canceled", canceled / total, "fraction", role=role)
        name = AI_CONTROL if control else system.label
        bench.progress(f"{name:40} {done}/{total} completed, {canceled} canceled")
        if system.kind == "scoped" and not control and done < total:
            bench.fail(f"{system.label}: only {done} of {total} detached runs completed")


async def model_hangups(bench: Bench, system: System, proc: ServerProcess, fake: FakeChatModel,
                        prefix: str, request: Callable[[str, int], bytes], *,
                        metric_prefix: str = "") -> None:
    """Hang up streams once their model call is under way; record what the model did after.

    Each run sends ``request(key, i)`` (a streamed send whose text is ``key``: the fake answers
    it with HOLD_CHUNKS, a token every HANGUP_DELAY s), closes the connection once the model
    has sent HUNG_UP_AT tokens, then waits until the model's connection is closed or its reply
    over. Recorded: the most tokens the model sent after a hang-up (counted when its connection
    closed, or at the reply's end), the calls left to finish their reply, the p99 time from
    the hang-up to the connection closed (a server that never closes one: "never").
    """
    runs = 3 if bench.sizes.quick else 10
    still_open, most_after, refused = 0, 0, 0
    delays: list[float] = []
    reply_time = len(HOLD_CHUNKS) * HANGUP_DELAY
    fake.delay = HANGUP_DELAY
    try:
        for i in range(runs):
            key = f"{HOLD_KEY}{prefix}-{i}"
            conn = await connect(proc.port)
            try:
                conn.send(request(key, i), lambda status, body: None)
                model = await _model_call(fake, key, 20.0)
                if model is None:  # CrewAI's helpers refuse a run while one is running
                    if system.kind == "scoped":
                        bench.fail(f"{system.label}: the model call of {key} never came")
                        return
                    refused += 1
                    continue
                hung_up, sent = time.monotonic(), model.chunks_sent
            finally:
                conn.close()
            deadline = hung_up + reply_time + 1.0
            while (not model.closed_by_client.is_set() and model.chunks_sent < len(HOLD_CHUNKS)
                   and time.monotonic() < deadline):
                await asyncio.sleep(0.005)
            most_after = max(most_after, model.chunks_sent - sent)
            if model.closed_by_client.is_set() and model.closed_at is not None:
                delays.append(model.closed_at - hung_up)
            else:
                still_open += 1
            await asyncio.sleep(0.05)  # the last run's teardown, off the next one's clock
    finally:
        fake.delay = 0.0
    m = metric_prefix
    bench.record(system, None, m + "hangups", runs - refused, "count",
                 note=f"{refused} runs never called the model" if refused else None)
    bench.record(system, None, m + "tokens_after", most_after, "tokens")
    bench.record(system, None, m + "open_after", still_open, "count")
    if delays:
        p99 = percentile(delays, 99) * 1e3
        bench.record(system, None, m + "closed_p99", p99, "ms")
    else:
        bench.record(system, None, m + "closed_p99", None, "ms", note="never")
    bench.progress(f"{system.label:40} {runs - refused} hang-ups ({refused} runs never "
                   f"called the model): up to {most_after} tokens after, "
                   f"{still_open} calls left to finish"
                   + (f", closed p99 {p99:.1f} ms" if delays else ", never closed"))
    if system.kind == "scoped" and still_open:
        bench.fail(f"{system.label}: {still_open} of {runs} model calls left to finish their "
                   "reply after a hang-up")


async def throughput(bench: Bench, system: System, proc: ServerProcess,
                     template: RequestTemplate, *, what: str = "sends", slow: bool = False,
                     check: Callable[[int, bytes], bool] = check, window: float = 2.0,
                     ) -> tuple[float, float, float] | None:
    """(right answers/s, p99 ms, fraction wrong) of ``CALLERS`` closed loops, or None (after
    ``bench.fail``). Wrong answers fail the run for scoped-a2a; a peer's are only counted.

    ``slow``: answers take hundreds of ms at ``CALLERS``, so the window is at least ``window``
    seconds (and the warm-up one), even with ``--quick`` (a window shorter than one answer
    would time nothing)."""
    duration = max(bench.sizes.duration, window) if slow else bench.sizes.duration
    warmup = max(bench.sizes.warmup, 1.0) if slow else bench.sizes.warmup
    async with await connect(proc.port) as probe:
        status, body = await probe.request(template.make(PROBE_ID))
    if not check(status, body):
        bench.fail(f"{system.label} {what}: answered {status}: {body[:300]!r}")
        return None
    conns = await connect_many(proc.port, CALLERS)
    loops = [Loop(conn, template, check, seq_base=(i + 1) * 10**8, port=proc.port)
             for i, conn in enumerate(conns)]
    try:
        await _drive(loops, warmup, record=False)
        for lp in loops:
            lp.latencies.clear()
            lp.errors = 0
        cpu_srv, cpu_gen = proc.cpu(), time.process_time()
        await _drive(loops, duration, record=True)
        srv = (proc.cpu() - cpu_srv) / duration
        gen = (time.process_time() - cpu_gen) / duration
    finally:
        for lp in loops:
            lp.conn.close()
    latencies = [x for lp in loops for x in lp.latencies]
    errors = sum(lp.errors for lp in loops)
    if not latencies:
        bench.fail(f"{system.label} {what}: no answer completed")
        return None
    if errors and system.kind == "scoped":
        bench.fail(f"{system.label} {what}: {errors} wrong answers")
    wrong = min(errors / len(latencies), 1.0)
    rps = max(len(latencies) - errors, 0) / duration
    p99 = percentile(latencies, 99) * 1e3
    bench.progress(f"{system.label:40} {what:7} c={CALLERS} {rps:7.1f}/s  p99 {p99:6.1f} ms  "
                   f"wrong {wrong:.0%}  server CPU {srv:.2f}  generator CPU {gen:.2f}")
    return rps, p99, wrong


async def _model_call(fake: FakeChatModel, key: str, timeout: float) -> Any:
    """The fake's connection whose request carries ``key``, once HUNG_UP_AT tokens are out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for conn in reversed(fake.connections):
            if (conn.body is not None and conn.chunks_sent >= HUNG_UP_AT
                    and key in json.dumps(conn.body)):
                return conn
        await asyncio.sleep(0.002)
    return None


async def _rpc(proc: ServerProcess, method: str, params: dict[str, Any]) -> Any:
    async with await connect(proc.port) as conn:
        _, answer = await conn.request(http_request(proc.port, rpc_body(method, params)))
    return json.loads(answer).get("result")


async def _count(proc: ServerProcess, context: str, state: str) -> int:
    result = await _rpc(proc, "ListTasks", {"contextId": context, "status": state, "pageSize": 1})
    return int((result or {}).get("totalSize", 0))


async def _task_state(proc: ServerProcess, task_id: str) -> str:
    result = await _rpc(proc, "GetTask", {"id": task_id, "historyLength": 0})
    return str(((result or {}).get("status") or {}).get("state", ""))


def _respond(body: dict[str, Any]) -> list[str]:
    return HOLD_CHUNKS if HOLD_KEY in json.dumps(body) else REPLY_CHUNKS
