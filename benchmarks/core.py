"""The runner's shared pieces: figures, the scenario interface, server sessions, progress.

A scenario is a class with a ``name``, a ``number``, the ``metrics`` it reports and an async
``run(bench)`` that starts its systems with ``bench.servers(...)``, drives them from this process
(the one load generator for every system) and records figures with ``bench.record``. Anything
that goes wrong is reported with ``bench.fail``; ``python -m benchmarks`` exits non-zero if any
scenario failed, so CI notices a benchmark that no longer runs.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .sidechannel import Signals
from .systems import ServerProcess, System, server_env


@dataclass(frozen=True, slots=True)
class Metric:
    """One column of a scenario's table.

    ``better`` is "higher" or "lower" (None: not a performance figure, no ratio). Metrics with
    ``ratio=True`` get a ratio line per peer: the scoped-a2a figure on the same server divided by
    the peer's, oriented so that a ratio above 1 means scoped-a2a is ahead.
    """

    key: str
    label: str
    unit: str
    better: str | None = None
    ratio: bool = False
    fmt: str = "{:.1f}"


@dataclass(slots=True)
class Row:
    scenario: str
    system: str
    backend: str
    metric: str
    value: float | None
    unit: str
    role: str = "peer"  # subject | peer | ceiling | control
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scenario": self.scenario, "system": self.system,
                               "backend": self.backend, "metric": self.metric,
                               "value": self.value, "unit": self.unit, "role": self.role}
        if self.note is not None:
            out["note"] = self.note
        return out


def role_of(system: System) -> str:
    return {"scoped": "subject", "bare": "ceiling"}.get(system.kind, "peer")


@dataclass
class Sizes:
    """How big each scenario runs: full by default, small with ``--quick``."""

    quick: bool
    warmup: float = 1.0
    duration: float = 5.0
    stream_runs: int = 30
    stream_duration: float = 3.0
    hangup_runs: int = 100
    hangup_wait: float = 2.0
    give_up_cancel: int = 3
    """Hang-ups in a row with no cancellation seen before a peer is called "never"."""
    idle_settle: float = 0.5
    fanout_sizes: tuple[int, ...] = (10, 100, 1000)
    fanout_events: int = 20
    events: int = 1000
    follower_runs: int = 20
    teardown_cap: float = 5.0
    teardown_work: float = 0.3
    give_up: int = 3
    soak_steps: int = 2000
    soak_runs: int = 2000
    soak_cap: float = 3.0

    @classmethod
    def make(cls, quick: bool) -> Sizes:
        if not quick:
            return cls(quick=False)
        return cls(quick=True, warmup=0.1, duration=0.5, stream_runs=5, stream_duration=0.5,
                   hangup_runs=10, hangup_wait=0.5, give_up_cancel=2, idle_settle=0.2,
                   fanout_sizes=(10, 100), fanout_events=8, events=150, follower_runs=2,
                   teardown_cap=2.5, teardown_work=0.1, give_up=1, soak_steps=80, soak_runs=80,
                   soak_cap=2.5)


class Scenario:
    name: ClassVar[str]
    number: ClassVar[int]
    title: ClassVar[str]
    metrics: ClassVar[Sequence[Metric]]
    notes: ClassVar[str] = ""
    tables: ClassVar[Sequence[tuple[str, Sequence[str]]]] = ()
    """Split the metrics over several tables: (subtitle, metric keys) each; default one table."""
    min_budget: ClassVar[float] = 0.0
    """Seconds this scenario may take at least, whatever the run's budget per scenario (the
    adapters scenario starts framework servers that take tens of seconds to import)."""
    pairs: ClassVar[Mapping[str, str]] = {}
    """Peer system name -> the subject system its ratios are taken against (on the same server);
    default: the one subject on the peer's server."""

    async def run(self, bench: Bench) -> None:
        raise NotImplementedError


@dataclass
class Bench:
    """One ``python -m benchmarks`` run: sizes, where servers run, and every figure so far."""

    sizes: Sizes
    python: str
    workdir: Path
    signals: Signals
    signal_port: int
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    scenario: str = ""
    only_systems: Sequence[str] = ()
    profile_dir: Path | None = None
    python311: str | None = None

    def wants(self, label: str) -> bool:
        """Whether ``--system`` lets the system labelled ``label`` run."""
        return not self.only_systems or any(_squash(t) in _squash(label)
                                            for t in self.only_systems)

    # --- reporting ------------------------------------------------------------------------

    def progress(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {self.scenario:>8} | {text}", file=sys.stderr, flush=True)

    def record(self, system: System | str, backend: str | None, metric: str,
               value: float | None, unit: str, *, role: str | None = None,
               note: str | None = None) -> None:
        if isinstance(system, System):
            name, backend, role = system.name, system.server, role or role_of(system)
        else:
            name = system
        self.rows.append(Row(self.scenario, name, backend or "", metric, value, unit,
                             role or "peer", note))

    def fail(self, text: str) -> None:
        self.failures.append(f"{self.scenario}: {text}")
        self.progress(f"FAILED: {text}")

    # --- servers --------------------------------------------------------------------------

    @asynccontextmanager
    async def servers(self, systems: Sequence[System], *, detach_rule: str | None = None,
                      ready_timeout: float = 60.0,
                      ) -> AsyncIterator[dict[System, ServerProcess]]:
        """Start ``systems`` (in parallel), yield the ones that came up; always stop them all.

        A system that does not come up within ``ready_timeout`` seconds is reported with
        ``fail`` and left out.
        """
        env = server_env(self.signal_port, self.workdir)
        systems = [s for s in systems if self.wants(s.label) or s.kind == "faulty"]
        procs = [ServerProcess(s, self.python, self.workdir, env, detach_rule) for s in systems]
        ready: dict[System, ServerProcess] = {}
        profilers: list[subprocess.Popen[bytes]] = []
        try:
            results = await asyncio.gather(*(p.wait_ready(ready_timeout) for p in procs),
                                           return_exceptions=True)
            for proc, result in zip(procs, results, strict=True):
                if isinstance(result, BaseException):
                    self.fail(f"{proc.system.label} did not start: {result}")
                else:
                    ready[proc.system] = proc
            if self.profile_dir is not None:
                profilers = [self._profile(p) for p in ready.values() if p.system.is_subject]
            yield ready
        finally:
            for prof in profilers:  # py-spy writes its file when interrupted
                prof.send_signal(signal.SIGINT)
            for prof in profilers:
                try:
                    prof.wait(30)
                except subprocess.TimeoutExpired:
                    prof.kill()
            await asyncio.gather(*(asyncio.to_thread(p.stop) for p in procs))

    def _profile(self, proc: ServerProcess) -> subprocess.Popen[bytes]:
        """Sample ``proc`` with py-spy (collapsed stacks, idle frames left out) until stopped."""
        assert self.profile_dir is not None
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = self.profile_dir / f"{self.scenario}-{proc.system.server}.txt"
        self.progress(f"profiling {proc.system.label} into {out}")
        return subprocess.Popen([spy, "record", "--format", "raw", "--rate", "200", "-o", str(out),
                                 "--pid", str(proc.pid)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)


async def run_scenario(bench: Bench, scenario: Scenario, timeout: float) -> None:
    """Run one scenario within ``timeout`` seconds (or its ``min_budget``); an error or overrun
    is a failure."""
    timeout = max(timeout, scenario.min_budget)
    bench.scenario = scenario.name
    bench.progress(f"scenario {scenario.number}: {scenario.title}")
    before = len(bench.rows)
    try:
        async with asyncio.timeout(timeout):
            await scenario.run(bench)
    except TimeoutError:
        bench.fail(f"did not finish within {timeout:.0f}s")
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        bench.fail(f"raised {type(exc).__name__}: {exc}")
    else:
        if len(bench.rows) == before:
            bench.fail("recorded no figures (no system ran)")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def _squash(text: str) -> str:
    return text.replace(" ", "").lower()
