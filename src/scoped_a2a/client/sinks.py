"""Where a step's trajectories go: in memory, or a directory a reader can poll.

A step sink records, for each turn of a step: the turn's metadata (which task, which agent, the
events' format), its live pages as they are read, how following ended, and which turn comes next.
The directory layout (every file written once, atomically; see :mod:`.atomic`)::

    DIR/next.json                       {"turn": "0001"}   the first turn (null: no turn)
    DIR/0001/meta.json                  the turn: taskId, contextId, agent, events' format
    DIR/0001/live/<after>-<next>.jsonl  one page: events after <after> up to <next>, one per line
    DIR/0001/end.json                   {"state": "TASK_STATE_COMPLETED", "next": 12}
    DIR/0001/next.json                  {"turn": "0002"}, or {"turn": null} for the step's last

A reader starts at ``DIR/next.json``, reads a turn's pages in order of ``<after>`` until
``end.json`` appears (``next`` there is the last position), then follows its ``next.json``. Names
starting with ``.`` are temporary files being written: ignore them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from ..protocol.types import TaskState
from .atomic import write_once
from .pages import LivePage, PageSink

_encode = msgspec.json.Encoder().encode


class StepSink(Protocol):
    """What a :class:`~.step.Step` writes a conversation's trajectories to."""

    async def link(self, previous: str | None, turn: str | None) -> None:
        """Record that ``turn`` follows ``previous`` (None: the step's first / no next turn)."""

    async def meta(self, turn: str, meta: dict[str, Any]) -> None:
        """Record a turn's metadata (once)."""

    def pages(self, turn: str) -> PageSink:
        """The page sink of a turn's follower."""

    async def end(self, turn: str, state: TaskState | None, next: int) -> None:
        """Record how following the turn ended (once)."""


def _end_record(state: TaskState | None, next: int) -> dict[str, Any]:
    return {"state": state.value if state is not None else None, "next": next}


@dataclass
class MemoryTurn:
    """One turn's record in a :class:`MemorySink`."""

    turn: str
    meta: dict[str, Any] | None = None
    pages: list[LivePage] = field(default_factory=list)
    end: dict[str, Any] | None = None
    next: str | None = None
    linked: bool = False  # ``next`` has been recorded (None then means: the last turn)

    @property
    def events(self) -> list[Any]:
        return [e for p in self.pages for e in p.events]

    async def __call__(self, page: LivePage) -> None:
        if self.pages and self.pages[-1].next == page.next and self.pages[-1].after == page.after:
            return  # the same page again: a no-op, as in the directory sink
        self.pages.append(page)


class MemorySink:
    """Keeps every turn's record in memory (``sink.turns``, in order: ``sink.order()``)."""

    def __init__(self) -> None:
        self.first: str | None = None
        self.first_linked = False
        self.turns: dict[str, MemoryTurn] = {}

    def turn(self, turn: str) -> MemoryTurn:
        if turn not in self.turns:
            self.turns[turn] = MemoryTurn(turn)
        return self.turns[turn]

    def order(self) -> list[MemoryTurn]:
        """The turns in the order the links give."""
        out: list[MemoryTurn] = []
        at = self.first
        while at is not None:
            out.append(self.turns[at])
            at = self.turns[at].next
        return out

    async def link(self, previous: str | None, turn: str | None) -> None:
        if previous is None:
            if self.first_linked and self.first != turn:
                raise ValueError("the first turn was already recorded")
            self.first, self.first_linked = turn, True
            return
        rec = self.turn(previous)
        if rec.linked and rec.next != turn:
            raise ValueError(f"the turn after {previous} was already recorded")
        rec.next, rec.linked = turn, True

    async def meta(self, turn: str, meta: dict[str, Any]) -> None:
        rec = self.turn(turn)
        if rec.meta is not None and rec.meta != meta:
            raise ValueError(f"turn {turn}'s metadata was already recorded")
        rec.meta = dict(meta)

    def pages(self, turn: str) -> PageSink:
        return self.turn(turn)

    async def end(self, turn: str, state: TaskState | None, next: int) -> None:
        rec = self.turn(turn)
        value = _end_record(state, next)
        if rec.end is not None and rec.end != value:
            raise ValueError(f"turn {turn}'s end was already recorded")
        rec.end = value


class _DirectoryPages:
    def __init__(self, live: Path, durable: bool) -> None:
        self._live = live
        self._durable = durable

    async def __call__(self, page: LivePage) -> None:
        await write_once(self._live / f"{page.after}-{page.next}.jsonl", page.jsonl(),
                         durable=self._durable)


class DirectorySink:
    """Writes a step's trajectories under ``path`` in the layout above.

    :param durable: fsync each file before it appears (slower; survives a power cut).
    :param resume: ``path`` may hold what an earlier attempt of the *same* step wrote (a retry
        after its process died): its files are kept, the same record written again is a no-op,
        and a different one raises :class:`FileExistsError` (logged by the step).
    :raises FileExistsError: ``path`` already holds a step's trajectories (its ``next.json``
        exists) and ``resume`` is false: files are final, so a second step there could only
        fail to write. Use a new folder for each step.
    """

    def __init__(self, path: str | Path, *, durable: bool = False, resume: bool = False) -> None:
        self.path = Path(path)
        self.durable = durable
        if not resume and (self.path / "next.json").exists():
            raise FileExistsError(
                f"{self.path} already holds a step's trajectories ({self.path / 'next.json'} "
                "exists); write to a new folder")

    async def _write(self, path: Path, value: Any) -> None:
        await write_once(path, _encode(value) + b"\n", durable=self.durable)

    async def link(self, previous: str | None, turn: str | None) -> None:
        where = self.path if previous is None else self.path / previous
        await self._write(where / "next.json", {"turn": turn})

    async def meta(self, turn: str, meta: dict[str, Any]) -> None:
        await self._write(self.path / turn / "meta.json", meta)

    def pages(self, turn: str) -> PageSink:
        return _DirectoryPages(self.path / turn / "live", self.durable)

    def turn_task(self, turn: str) -> tuple[str, bool] | None:
        """The task ``turn``'s metadata names and whether its end is recorded; None when the
        turn has no task on disk (never started, or answered by a message)."""
        try:
            meta = msgspec.json.decode((self.path / turn / "meta.json").read_bytes())
        except (FileNotFoundError, msgspec.DecodeError):
            return None
        task_id = meta.get("taskId") if isinstance(meta, dict) else None
        if not isinstance(task_id, str):
            return None
        return task_id, (self.path / turn / "end.json").exists()

    def pages_end(self, turn: str, after: int) -> int:
        """Where the pages on disk that continue ``turn``'s trajectory from position ``after``
        end: ``after``, or the ``next`` of the last page of the unbroken chain
        ``<after>-<a>.jsonl``, ``<a>-<b>.jsonl``, ... (a follower writes its pages in order,
        each whole, so the chain is what a dead attempt wrote after it last reported ``after``).
        """
        ends: dict[int, int] = {}
        live = self.path / turn / "live"
        names = [p.name for p in live.iterdir()] if live.is_dir() else []
        for name in names:
            first, dash, last = name.removesuffix(".jsonl").partition("-")
            if name.endswith(".jsonl") and dash and first.isdigit() and last.isdigit():
                ends[int(first)] = max(ends.get(int(first), int(first)), int(last))
        at = after
        while ends.get(at, at) > at:
            at = ends[at]
        return at

    async def end(self, turn: str, state: TaskState | None, next: int) -> None:
        await self._write(self.path / turn / "end.json", _end_record(state, next))
