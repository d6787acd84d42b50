"""Scenario 15's a2a-sdk 0.3 part: Strands, BeeAI and CrewAI, on their own servers and here.

a2a-sdk 0.3 (what these frameworks pin) and 1.x cannot share an environment, so this part runs
in a child process in the 0.3 one: ``python -m benchmarks`` (1.x) finds its Python
(``$BENCH_SDK03_PYTHON``, else ``.venv-sdk03/bin/python`` in the checkout, which
``scripts/test`` makes; with ``--quick`` only the former) and runs ``python -m
benchmarks.scenarios.adapters03 --out ROWS.json`` there (:func:`run_in_sdk03_environment`);
without one the part is skipped and the table says so. The child runs its own fake model
(``scoped_a2a.testing.fake_llm``) and, one framework at a time, two servers on hypercorn's
asyncio worker: the framework's agent (``tests/sdk03/framework_agents.py``, the tests' own)
served the way the framework serves it (``benchmarks/peers/frameworks03.py``), and the same
object on ``serve --agent``. Figures, per server: blocking sends per second at c=20 (0.3's
``message/send``, as these frameworks' callers send it; a wrong answer, such as CrewAI's
"Executor is already running" for a second concurrent run of one agent, is counted, not timed as
a success), then hang-ups of ``message/stream`` (:func:`.adapters.model_hangups`: tokens the
model sent after each, calls left to finish, time to the model connection's close). The rows go
back as JSON; the parent adds them to its tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scoped_a2a.testing.fake_llm import Chunk, ToolCall, fake_chat_model

from ..core import Bench, Row, Sizes
from ..loadgen import RequestTemplate, http_request, rpc_body
from ..sidechannel import open_signals
from ..systems import REPO, ServerProcess, System
from .adapters import (
    CREWAI_COPY,
    FRAMEWORKS,
    HOLD_CHUNKS,
    HOLD_IDS,
    HOLD_KEY,
    REPLY_CHUNKS,
    SERVER,
    Served,
    model_hangups,
    native_title,
    scoped_title,
    throughput,
)

SYSTEMS = (*(
    system for framework in FRAMEWORKS for system in (
        Served("native", SERVER, ("--framework", framework), title=native_title(framework),
               target="benchmarks.peers.frameworks03"),
        Served("scoped", SERVER, title=scoped_title(framework),
               target=f"tests.sdk03.framework_agents:{framework}"),
    )),
    Served("native", SERVER, ("--framework", "crewai-copy"), title=CREWAI_COPY,
           target="benchmarks.peers.frameworks03"),
)


READY_TIMEOUT = 180.0
"""Seconds a framework's server may take to start (importing CrewAI takes seconds of CPU)."""
FRAMEWORK_WINDOW = 10.0
"""Seconds of each framework's sends/s window (a run takes a framework hundreds of ms)."""


class Request03(RequestTemplate):
    """A 0.3 JSON-RPC request (``message/send``, ``message/stream``; no A2A-Version header),
    with the unique message id spliced in as RequestTemplate does."""

    def __init__(self, port: int, method: str, text: str, *, stream: bool = False) -> None:
        marker = "#" * self.WIDTH
        message = {"kind": "message", "messageId": f"m-{secrets.token_hex(6)}-{marker}",
                   "role": "user", "parts": [{"kind": "text", "text": text}]}
        raw = http_request(port, rpc_body(method, {"message": message}), stream=stream)
        raw = raw.replace(b"A2A-Version: 1.0\r\n", b"")
        self._head, _, self._tail = raw.partition(marker.encode())


def completed(status: int, body: bytes) -> bool:
    return status == 200 and b'"completed"' in body and b'"error"' not in body


def respond(framework: str) -> Callable[[dict[str, Any]], list[Chunk]]:
    """The fake model's answers for ``framework``: HOLD_CHUNKS for a hang-up run, else a short
    one; BeeAI's RequirementAgent then wants its ``final_answer`` tool called with the text
    (without it, it asks the model three times more)."""
    def answer(body: dict[str, Any]) -> list[Chunk]:
        text = HOLD_CHUNKS if HOLD_KEY in json.dumps(body.get("messages")) else REPLY_CHUNKS
        if framework == "beeai":
            return [*text, ToolCall("final_answer", {"response": "".join(text)})]
        return list(text)

    return answer


async def measure(bench: Bench, only: list[str]) -> None:
    async with fake_chat_model(respond("")) as fake:
        os.environ["MODEL_URL"] = fake.url  # the servers' environment: their agents' model
        for framework in FRAMEWORKS:
            if only and framework not in only:
                continue
            # One framework's pair at a time: each server takes seconds of CPU to import its
            # framework, and the pair is measured without the others' servers beside it.
            pair = [s for s in SYSTEMS if framework in " ".join((*s.options, s.target))]
            fake.respond = respond(framework)
            async with bench.servers(pair, ready_timeout=READY_TIMEOUT) as running:
                for system, proc in running.items():
                    await one(bench, system, proc, fake, f"{framework}-{system.kind}")


async def one(bench: Bench, system: System, proc: ServerProcess, fake: Any, prefix: str
              ) -> None:
    rate = await throughput(bench, system, proc, Request03(proc.port, "message/send", "hello"),
                            slow=True, check=completed, window=FRAMEWORK_WINDOW)
    if rate is not None:
        bench.record(system, None, "fw_rps", rate[0], "req/s")
        bench.record(system, None, "fw_failed", rate[2], "fraction")
    await model_hangups(bench, system, proc, fake, prefix, lambda key, i: Request03(
        proc.port, "message/stream", key, stream=True).make(HOLD_IDS + i), metric_prefix="fw_")


async def _child(args: argparse.Namespace) -> int:
    signals, port = await open_signals()
    bench = Bench(sizes=Sizes.make(args.quick), python=sys.executable, workdir=args.workdir,
                  signals=signals, signal_port=port)
    bench.scenario = "adapters"
    try:
        await measure(bench, args.only)
    finally:
        signals.close()
        args.out.write_text(json.dumps({"rows": [asdict(r) for r in bench.rows],
                                        "failures": bench.failures}))
    return 0


def sdk03_python(quick: bool) -> str | None:
    """The 0.3 environment's Python: $BENCH_SDK03_PYTHON, else (not with ``--quick``, which CI
    runs: this part takes minutes) the checkout's .venv-sdk03."""
    given = os.environ.get("BENCH_SDK03_PYTHON")
    if given:
        return given
    local = REPO / ".venv-sdk03" / "bin" / "python"
    return str(local) if local.exists() and not quick else None


async def run_in_sdk03_environment(bench: Bench) -> None:
    """Run this part in the 0.3 environment's Python and add its rows (or say it was skipped)."""
    python = sdk03_python(bench.sizes.quick)
    if python is None:
        why = ("--quick (set BENCH_SDK03_PYTHON to run it)" if bench.sizes.quick else
               "no a2a-sdk 0.3 environment: scripts/test makes .venv-sdk03, or set "
               "BENCH_SDK03_PYTHON")
        bench.progress(f"Strands, BeeAI, CrewAI: skipped ({why})")
        for framework in FRAMEWORKS:
            bench.record(native_title(framework), SERVER, "fw_rps", None, "req/s",
                         note="skipped")
        return
    out = bench.workdir / "adapters03.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO),
                                         *filter(None, [env.get("PYTHONPATH")])])
    child = await asyncio.create_subprocess_exec(
        python, "-m", "benchmarks.scenarios.adapters03", "--out", str(out),
        "--workdir", str(bench.workdir), *(["--quick"] if bench.sizes.quick else []),
        cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL)
    try:
        code = await child.wait()
    except BaseException:  # the scenario's budget ran out: the child and its servers go too
        child.kill()
        await child.wait()
        raise
    if not out.exists():
        bench.fail(f"the a2a-sdk 0.3 part ({python}) exited {code} without its figures")
        return
    data = json.loads(out.read_text())
    bench.rows.extend(Row(**row) for row in data["rows"])
    bench.failures.extend(data["failures"])
    if code != 0:
        bench.fail(f"the a2a-sdk 0.3 part ({python}) exited {code}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", default=[], metavar="FRAMEWORK",
                        help="only these frameworks' servers (strands, beeai, crewai)")
    args = parser.parse_args()
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="scoped-a2a-bench03-"))
    return asyncio.run(_child(args))


if __name__ == "__main__":
    sys.exit(main())
