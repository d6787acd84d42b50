"""``Step.rejoin`` with ``DirectorySink(resume=True)``: a second process takes over a turn the
first one sent and followed part of, without sending it again; the pages on disk chain from the
first event to the turn's end with no gap and no duplicate line (what scoped_a2a.temporal does
on a retried activity; tests/test_temporal.py runs it under Temporal)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import anyio
import pytest

from scoped_a2a import A2AApp, A2AClient, DirectorySink, Step
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.client import Follower
from scoped_a2a.protocol.types import Task, TaskState

from .helpers import served

pytestmark = pytest.mark.anyio


def _chain(live: Path) -> tuple[list[tuple[int, int]], list[int]]:
    pages = sorted(tuple(int(x) for x in f.name.removesuffix(".jsonl").split("-"))
                   for f in live.glob("*.jsonl"))
    positions = [json.loads(line)["position"] for a, b in pages
                 for line in (live / f"{a}-{b}.jsonl").read_text().splitlines()]
    return pages, positions  # type: ignore[return-value]


async def test_rejoin_takes_over_a_turn_without_gap_or_duplicate(tmp_path: Path) -> None:
    out = tmp_path / "step"
    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client:
        # The first attempt: sends the turn (a detached run), follows part of it, dies.
        first = DirectorySink(out)
        await first.link(None, "0001")
        task = await client.send("slow 1", return_immediately=True)
        assert isinstance(task, Task)
        follower = Follower(client, task.id, first.pages("0001"), mode="read",
                            poll_interval=0.05)
        with anyio.move_on_after(0.4):
            await follower.run()
        assert follower.cursor > 0
        with pytest.raises(FileExistsError):
            DirectorySink(out)  # a second step in the same folder is refused...
        second = DirectorySink(out, resume=True)  # ...unless it resumes the same step
        assert second.pages_end("0001", 0) == follower.cursor
        # The second attempt: takes the turn over where the pages on disk end.
        async with Step(client, sink=second, poll_interval=0.05) as step:
            ended = await step.rejoin(task.id, after=second.pages_end("0001", 0))
        assert ended.id == task.id and ended.status.state == TaskState.COMPLETED
        assert len(step.turns) == 1 and step.turns[0].follower is not None
        assert step.turns[0].follower.cursor > follower.cursor
        # Nothing was sent again: the agent knows this one task.
        assert second.turn_task("0001") == (task.id, True)
    pages, positions = _chain(out / "0001" / "live")
    assert pages[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(pages))
    assert positions == sorted(set(positions))
    end = json.loads((out / "0001" / "end.json").read_text())
    assert end == {"state": "TASK_STATE_COMPLETED", "next": pages[-1][1]}
    assert json.loads((out / "0001" / "next.json").read_text()) == {"turn": None}


async def test_rejoin_of_an_ended_turn_follows_and_records_nothing(tmp_path: Path) -> None:
    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client:
        sink = DirectorySink(tmp_path / "step")
        async with Step(client, sink=sink) as step:
            done = await step.turn("hello")
        assert isinstance(done, Task)
        files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        again = DirectorySink(tmp_path / "step", resume=True)
        async with Step(client, sink=again) as step:
            task = await step.rejoin(done.id, after=0, ended=True)
        assert task.status.state == TaskState.COMPLETED and step.turns[0].follower is None
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == files


async def test_rejoin_of_a_turn_given_up_on_waits_for_the_task_it_left_running(
    tmp_path: Path,
) -> None:
    """An attempt that gave up on a detached turn (cancelled by a heartbeat timeout, say)
    recorded its end as canceled while the task ran on: the retry's ``rejoin(ended=True)``
    returns the task's own end, not the task as it was mid-run, and records nothing more."""
    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client:
        sink = DirectorySink(tmp_path / "step")
        task = await client.send("slow 1", return_immediately=True)
        assert isinstance(task, Task)
        await sink.link(None, "0001")
        await sink.meta("0001", {"taskId": task.id})
        await sink.end("0001", TaskState.CANCELED, 0)
        await sink.link("0001", None)  # the step's exit, after the turn
        files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        again = DirectorySink(tmp_path / "step", resume=True)
        assert again.turn_task("0001") == (task.id, True)
        async with Step(client, sink=again, poll_interval=0.05) as step:
            ended = await step.rejoin(task.id, after=0, ended=True)
        assert ended.status.state == TaskState.COMPLETED, ended.status
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == files
