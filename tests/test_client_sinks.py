"""Sinks: write-once atomic files, and the directory layout a reader polls, from real steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from scoped_a2a import A2AApp, A2AClient, DirectorySink, Step
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.client.atomic import write_once_sync
from scoped_a2a.protocol.types import Task, TaskState

from .client_helpers import assert_no_followers_left
from .helpers import served

pytestmark = pytest.mark.anyio


def test_files_are_written_once_atomically(tmp_path: Path) -> None:
    target = tmp_path / "a" / "end.json"
    assert write_once_sync(target, b'{"x":1}\n') is True
    assert write_once_sync(target, b'{"x":1}\n') is False  # the same bytes again: a no-op
    with pytest.raises(FileExistsError):
        write_once_sync(target, b'{"x":2}\n')  # a final file is never overwritten
    assert target.read_bytes() == b'{"x":1}\n'
    assert [p.name for p in target.parent.iterdir()] == ["end.json"]  # no temporary left


class Reader:
    """Polls a step directory the way a consumer would, decoding every final file it sees."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: dict[str, bytes] = {}

    def poll(self) -> None:
        for path in self.root.rglob("*"):
            if path.is_dir() or path.name.startswith("."):
                continue
            data = path.read_bytes()
            for line in data.splitlines():
                json.loads(line)  # a half-written file would fail here
            key = str(path.relative_to(self.root))
            assert self.seen.setdefault(key, data) == data, f"{key} changed after it appeared"

    def turns(self) -> list[dict[str, Any]]:
        """Walk the step as a reader: first turn, pages in order, end, next turn."""
        out = []
        turn = json.loads((self.root / "next.json").read_bytes())["turn"]
        while turn is not None:
            d = self.root / turn
            pages = sorted((d / "live").glob("*.jsonl"),
                           key=lambda p: int(p.name.split("-")[0]))
            spans = [tuple(int(x) for x in p.stem.split("-")) for p in pages]
            events = [json.loads(line) for p in pages for line in p.read_bytes().splitlines()]
            out.append({
                "id": turn, "meta": json.loads((d / "meta.json").read_bytes()),
                "end": json.loads((d / "end.json").read_bytes()), "spans": spans,
                "events": events,
            })
            turn = json.loads((d / "next.json").read_bytes())["turn"]
        return out


@pytest.mark.parametrize("mode", ["read", "subscribe"])
async def test_directory_layout_of_a_two_turn_step(tmp_path: Path, mode: str) -> None:
    reader = Reader(tmp_path)

    async def poll() -> None:
        while True:
            reader.poll()
            await anyio.sleep(0.001)

    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client, \
            anyio.create_task_group() as tg:
        tg.start_soon(poll)
        async with Step(client, sink=DirectorySink(tmp_path), mode=mode) as step:  # type: ignore[arg-type]
            asked = await step.turn("ask")
            assert isinstance(asked, Task) and asked.status.state is TaskState.INPUT_REQUIRED
            done = await step.turn("bananas")
            assert isinstance(done, Task) and done.status.state is TaskState.COMPLETED
        tg.cancel_scope.cancel()
    reader.poll()
    assert_no_followers_left()
    turns = reader.turns()
    assert [t["id"] for t in turns] == ["0001", "0002"]
    assert turns[0]["meta"]["taskId"] == turns[1]["meta"]["taskId"] == done.id
    assert turns[0]["meta"]["format"] == "scoped-a2a/logged-event/v1"
    assert turns[0]["meta"]["source"] == mode
    assert turns[0]["end"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert turns[1]["end"]["state"] == "TASK_STATE_COMPLETED"
    cursor = 0
    for t in turns:  # pages are contiguous across the whole task, turn after turn
        for after, nxt in t["spans"]:
            assert after == cursor and nxt > after
            cursor = nxt
        assert t["end"]["next"] == cursor
        assert all(set(e) == {"position", "kind", "event"} for e in t["events"])
    if mode == "read":  # the agent's own events come with the trajectory extension
        assert any(e["kind"] == "trajectory" for e in turns[0]["events"])


async def test_a_cancelled_turn_is_recorded_canceled(tmp_path: Path) -> None:
    seen: list[object] = []

    def cancel_once_followed(event: object) -> None:
        seen.append(event)
        if len(seen) == 2:  # the turn's task exists and its follower has started
            scope.cancel()

    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client:
        with anyio.CancelScope() as scope:
            async with Step(client, sink=DirectorySink(tmp_path)) as step:
                await step.turn("slow 5", on_event=cancel_once_followed)
    assert scope.cancelled_caught
    assert_no_followers_left()
    [turn] = Reader(tmp_path).turns()
    assert turn["end"]["state"] == "TASK_STATE_CANCELED"
    assert turn["end"]["next"] == (turn["spans"][-1][1] if turn["spans"] else 0)
    assert step.turns[0].state is None  # the step never saw the task end


async def test_a_failing_sink_never_fails_the_turn_or_the_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from scoped_a2a.client import LivePage, MemorySink

    class BrokenPages(MemorySink):
        def pages(self, turn: str) -> Any:
            async def write(page: LivePage) -> None:
                raise OSError("disk full")

            return write

    sink = BrokenPages()
    async with served(A2AApp(demo_agent)) as url, A2AClient(url) as client:
        async with Step(client, sink=sink) as step:
            task = await step.turn("hello")
        assert isinstance(task, Task) and task.status.state is TaskState.COMPLETED
    assert_no_followers_left()
    assert step.turns[0].follower is not None and step.turns[0].follower.outcome == "error"
    assert "failed" in caplog.text and "disk full" in caplog.text
    # the end is still recorded, with the state the step saw
    assert sink.turns["0001"].end == {"state": "TASK_STATE_COMPLETED", "next": 0}
