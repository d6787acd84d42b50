"""The client side of scenarios 4 and 6, run as its own process (one per system under test).

    python -m benchmarks.steprunner --pattern scoped|old --backend asyncio|trio --url URL \\
        teardown --ending cancelled,raises,returns --runs N --cap S
    python -m benchmarks.steprunner ... soak --steps N --concurrency C --cap S

``scoped`` runs scoped-a2a's ``Step`` (its follower reads the turn's live trajectory); ``old``
runs :mod:`benchmarks.oldstep`, the asyncio pattern it replaces (asyncio only; the benchmark runs
it on Python 3.11). Each run prints one JSON line; the last line is a summary of the process:
tasks still alive, open file descriptors, resident memory. A step that has not ended ``--cap``
seconds after it was told to end is reported as hung and abandoned (the old pattern's hung steps
stay alive in the process, which is the point: the summary counts them). The process exits with
``os._exit`` so an abandoned asyncio task cannot hang the interpreter's shutdown too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from contextlib import suppress
from typing import Any

CANCEL_AFTER = 0.2
"""Seconds into a turn at which a cancelled step is cancelled."""


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def process_stats() -> dict[str, Any]:
    fds = len(os.listdir("/proc/self/fd"))
    rss = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return {"fds": fds, "rss": rss, "tasks_alive": count_tasks()}


def count_tasks() -> int:
    """Tasks alive in this process now, the runner's own task excluded."""
    import sniffio

    if sniffio.current_async_library() == "trio":
        import trio

        def walk(task: Any) -> int:
            return 1 + sum(walk(t) for n in task.child_nurseries for t in n.child_tasks)

        return walk(trio.lowlevel.current_root_task()) - walk(trio.lowlevel.current_task())
    return len(asyncio.all_tasks()) - 1


WORK = 0.3
"""Seconds the agent works per turn (a cancelled step's turn works 0.5 s longer)."""


def set_work(seconds: float) -> None:
    global WORK
    WORK = seconds


def text_for(ending: str) -> str:
    return f"work {WORK + 0.5 if ending == 'cancelled' else WORK}"


# --- scoped-a2a's Step ----------------------------------------------------------------------


async def scoped_step(client: Any, ending: str, cap: float, *, cancel_after: float | None = None
                      ) -> dict[str, Any]:
    """One step of one turn that ends as ``ending``; returns its timeline.

    ``t0`` is when the step was told to end: cancelled, or its body raised or returned (also
    when the turn itself raised, e.g. its send failed); ``end`` is when the step had ended.
    """
    import anyio

    from scoped_a2a import MemorySink, Step

    rec: dict[str, Any] = {"ending": ending}
    started, told, ended = anyio.Event(), anyio.Event(), anyio.Event()
    box: list[Any] = []
    scope = anyio.CancelScope()

    async def body() -> None:
        try:
            async with Step(client, sink=MemorySink()) as step:
                box.append(step)
                try:
                    await step.turn(text_for(ending), on_event=lambda _: started.set())
                finally:
                    rec["turn_end"] = time.monotonic()
                if ending == "cancelled":
                    await anyio.sleep_forever()
                if ending == "raises":
                    raise RuntimeError("the body failed")
        finally:
            rec.setdefault("t0", rec.get("turn_end", time.monotonic()))
            told.set()
            started.set()  # (a turn that failed before its first event: nothing to wait for)

    async def run() -> None:
        try:
            with scope, suppress(Exception):
                await body()
        finally:
            rec["end"] = time.monotonic()
            ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        if ending == "cancelled":
            with anyio.move_on_after(10):
                await started.wait()
            await anyio.sleep(cancel_after if cancel_after is not None else CANCEL_AFTER)
            if not told.is_set():
                rec["t0"] = rec["turn_end"] = time.monotonic()
                told.set()
            scope.cancel()
        with anyio.move_on_after(60):
            await told.wait()
        with anyio.move_on_after(cap):
            await ended.wait()
        rec["hung"] = not ended.is_set()
        scope.cancel()  # (a no-op for a step that ended)
    if box and box[0].turns:
        turn = box[0].turns[0]
        rec["task_id"] = turn.task_id
        if turn.follower is not None:
            rec["failed_after_stop"] = turn.follower.failed_reads_after_stop
            rec["outcome"] = turn.follower.outcome
    return rec


async def scoped_main(args: argparse.Namespace) -> None:
    from scoped_a2a import A2AClient

    async with A2AClient(args.url, timeout=5.0) as client:
        if args.command == "teardown":
            for ending in args.ending.split(","):
                for i in range(args.runs):
                    rec = await scoped_step(client, ending, args.cap)
                    emit({"run": i, **rec})
                    if rec["hung"]:
                        break
        else:
            await soak(args, lambda ending, rng: scoped_step(
                client, ending, args.cap, cancel_after=rng.uniform(0.0, 0.5)))
        emit({"summary": True, **process_stats()})
    os._exit(0)  # (trio: nothing is left; kept symmetric with the old pattern)


# --- the old pattern ------------------------------------------------------------------------


async def old_run(http: Any, url: str, ending: str, cap: float, *,
                  cancel_after: float | None = None) -> dict[str, Any]:
    from .oldstep import OldStats, old_step

    stats = OldStats()
    started, told, ended = asyncio.Event(), asyncio.Event(), asyncio.Event()
    stats.told = told
    task = asyncio.create_task(old_step(http, url, text_for(ending), ending, stats, started))
    def on_done(_: object) -> None:
        stats.end = time.monotonic()
        ended.set()

    task.add_done_callback(on_done)
    if ending == "cancelled":
        with suppress(TimeoutError):
            async with asyncio.timeout(10):
                await started.wait()
        await asyncio.sleep(cancel_after if cancel_after is not None else CANCEL_AFTER)
        if not told.is_set():
            stats.t0 = stats.turn_end = time.monotonic()
            told.set()
        task.cancel()
    with suppress(TimeoutError):
        async with asyncio.timeout(60):
            await told.wait()
    with suppress(TimeoutError):
        async with asyncio.timeout(cap):
            await ended.wait()
    rec = {"ending": ending, "task_id": stats.task_id, "t0": stats.t0, "end": stats.end,
           "turn_end": stats.turn_end, "hung": stats.end is None,
           "failed_after_stop": stats.failed_after_stop}
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: the raising ending raised on purpose
    return rec


async def old_main(args: argparse.Namespace) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=5.0) as http:
        if args.command == "teardown":
            for ending in args.ending.split(","):
                hung = 0
                for i in range(args.runs):
                    rec = await old_run(http, args.url, ending, args.cap)
                    emit({"run": i, **rec})
                    hung += rec["hung"]
                    if hung >= args.give_up:
                        break
        else:
            await soak(args, lambda ending, rng: old_run(
                http, args.url, ending, args.cap, cancel_after=rng.uniform(0.0, 0.5)))
        emit({"summary": True, **process_stats()})
    os._exit(0)  # abandoned followers may still run: do not let asyncio.run wait for them


# --- the soak -------------------------------------------------------------------------------


async def soak(args: argparse.Namespace, one: Any) -> None:
    """``--steps`` steps, ``--concurrency`` at a time, each ending a random way at a random
    point."""
    import anyio

    rng = random.Random(6)
    emit({"before": True, **process_stats()})
    next_step = iter(range(args.steps))
    totals = {"steps": 0, "hung": 0, "failed_after_stop": 0}

    async def worker() -> None:
        for _ in next_step:
            ending = rng.choice(("cancelled", "raises", "returns"))
            rec = await one(ending, rng)
            totals["steps"] += 1
            totals["hung"] += bool(rec.get("hung"))
            totals["failed_after_stop"] += int(rec.get("failed_after_stop") or 0)

    async with anyio.create_task_group() as tg:
        for _ in range(args.concurrency):
            tg.start_soon(worker)
    await anyio.sleep(0.5)  # let what ends by itself end before counting
    emit({"soak": True, **totals})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pattern", choices=["scoped", "old"], required=True)
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--url", required=True)
    p.add_argument("--work", type=float, default=WORK, help="seconds the agent works per turn")
    p.add_argument("--cap", type=float, default=5.0,
                   help="seconds after it was told to end before a step counts as hung")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("teardown")
    t.add_argument("--ending", required=True,
                   help="cancelled, raises or returns, or several separated by commas")
    t.add_argument("--runs", type=int, default=20)
    t.add_argument("--give-up", type=int, default=3, help="stop after this many hung runs")
    s = sub.add_parser("soak")
    s.add_argument("--steps", type=int, default=1000)
    s.add_argument("--concurrency", type=int, default=16)
    args = p.parse_args()
    set_work(args.work)
    if args.pattern == "old" and args.backend != "asyncio":
        p.error("the old pattern is asyncio code")
    try:
        if args.pattern == "old":
            asyncio.run(old_main(args))
        else:
            import anyio

            anyio.run(scoped_main, args, backend=args.backend)
    except BaseException as exc:  # report, then leave without waiting on abandoned tasks
        import traceback

        traceback.print_exc()
        emit({"error": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
