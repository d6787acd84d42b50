"""``python -m benchmarks``: scoped-a2a side by side with its peers, in one run.

Every server runs in its own process; this process is the one load generator for all of them.
Progress goes to stderr while it runs; the tables (and ratios) go to stdout at the end. Exits 1 if
any scenario failed to run (CI runs ``--quick`` so the benchmarks never rot).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import report
from .core import Bench, Sizes, run_scenario
from .scenarios import all_scenarios
from .sidechannel import open_signals
from .systems import python_for_servers


def _parser() -> argparse.ArgumentParser:
    names = ", ".join(s.name for s in all_scenarios())
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="every scenario at small sizes (under two minutes; what CI runs)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"run only this scenario (repeatable; by name or number): {names}")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON rows")
    p.add_argument("--plot", type=Path, metavar="PATH.png", help="draw the main ratios")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the tables as markdown")
    p.add_argument("--system", action="append", metavar="TEXT",
                   help="only systems whose 'name / server' label contains TEXT (repeatable)")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="record a py-spy profile of every scoped-a2a server into DIR "
                        "(pip install py-spy)")
    p.add_argument("--py311", metavar="PYTHON",
                   help="the Python 3.11 the follower baseline runs on (default: this Python "
                        "if it is 3.11, else $BENCH_PY311 or python3.11 on the PATH)")
    p.add_argument("--keep-logs", action="store_true", help="keep the servers' logs")
    return p


async def _main(args: argparse.Namespace) -> int:
    scenarios = all_scenarios()
    if args.only:
        wanted = {w.lower() for w in args.only}
        unknown = wanted - {s.name for s in scenarios} - {str(s.number) for s in scenarios}
        if unknown:
            print(f"unknown scenario(s): {', '.join(sorted(unknown))}; "
                  f"known: {', '.join(s.name for s in scenarios)}", file=sys.stderr)
            return 2
        scenarios = [s for s in scenarios if s.name in wanted or str(s.number) in wanted]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 8192):  # a thousand subscribers need a thousand sockets on each side
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    python = python_for_servers()
    env = report.environment(python)
    workdir = Path(tempfile.mkdtemp(prefix="scoped-a2a-bench-"))
    signals, port = await open_signals()
    bench = Bench(sizes=Sizes.make(args.quick), python=python, workdir=workdir, signals=signals,
                  signal_port=port, only_systems=args.system or [], profile_dir=args.profile,
                  python311=args.py311)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    budget = 110.0 if args.quick else 1800.0
    started = time.monotonic()
    try:
        for scenario in scenarios:
            await run_scenario(bench, scenario, budget)
    finally:
        signals.close()
    elapsed = time.monotonic() - started
    load_end = report.environment(python)["machine"]["load_average_at_start"]
    out = []
    for scenario in scenarios:
        rows = [r for r in bench.rows if r.scenario == scenario.name]
        if rows:
            out.append(report.table(scenario, rows))
    print("\n\n".join(out))
    print(f"\n{len(scenarios)} scenario(s) in {elapsed:.0f}s; load average (1 min) at start "
          f"{env['machine']['load_average_at_start'][0]:.2f}, at end {load_end[0]:.2f}; "
          f"Python {env['python']}")
    extra = {"quick": args.quick, "elapsed_s": elapsed, "failures": bench.failures,
             "load_average_at_end": load_end}
    if args.json:
        report.write_json(args.json, scenarios, bench.rows, env, extra)
    if args.markdown:
        args.markdown.write_text("\n\n".join(
            report.markdown(s, [r for r in bench.rows if r.scenario == s.name])
            for s in scenarios if any(r.scenario == s.name for r in bench.rows)) + "\n")
    if args.plot:
        report.plot(args.plot, scenarios, bench.rows)
    if bench.failures:
        print(f"\n{len(bench.failures)} failure(s):", file=sys.stderr)
        for f in bench.failures:
            print(f"  {f}", file=sys.stderr)
        print(f"server logs kept in {workdir}", file=sys.stderr)
        return 1
    if not args.keep_logs:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main() -> int:
    args = _parser().parse_args()
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
