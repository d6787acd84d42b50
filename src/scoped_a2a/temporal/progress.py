"""A step's position, as an activity's heartbeat details carry it across attempts.

The details are plain JSON (Temporal's default converter encodes them)::

    {"version": 1, "turns": [
        {"turn": "0001", "taskId": "t-1", "cursor": 17, "recorded": true},
        {"turn": "0002", "taskId": "t-2", "cursor": 4, "recorded": false}]}

``cursor`` is the last trajectory position the turn's follower delivered to the sink;
``recorded`` says the turn's end is in the sink. Details this module did not write (another
activity's, an older version's) read as "no progress": the attempt starts from the beginning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

VERSION = 1


@dataclass(frozen=True)
class TurnProgress:
    """Where one turn of a step stood: its task, its follower's cursor, its end recorded."""

    turn: str
    task_id: str | None
    cursor: int = 0
    recorded: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "taskId": self.task_id, "cursor": self.cursor,
                "recorded": self.recorded}


@dataclass(frozen=True)
class StepProgress:
    """The position of every turn a step has started, in order."""

    turns: tuple[TurnProgress, ...] = field(default=())

    def to_details(self) -> dict[str, Any]:
        """The heartbeat details (JSON-able)."""
        return {"version": VERSION, "turns": [t.to_json() for t in self.turns]}

    @classmethod
    def from_details(cls, details: Sequence[Any]) -> StepProgress:
        """Read the last heartbeat's details (``activity.info().heartbeat_details``); anything
        unreadable is no progress."""
        if not details:
            return cls()
        last = details[0]
        if not isinstance(last, dict) or last.get("version") != VERSION:
            return cls()
        turns: list[TurnProgress] = []
        for raw in last.get("turns") or []:
            try:
                turns.append(TurnProgress(
                    turn=str(raw["turn"]),
                    task_id=None if raw.get("taskId") is None else str(raw["taskId"]),
                    cursor=int(raw.get("cursor") or 0),
                    recorded=bool(raw.get("recorded")),
                ))
            except (KeyError, TypeError, ValueError):
                return cls()
        return cls(tuple(turns))

    def turn(self, index: int) -> TurnProgress | None:
        """The ``index``-th turn's progress (0-based), if the earlier attempt had sent it."""
        if index < len(self.turns) and self.turns[index].task_id is not None:
            return self.turns[index]
        return None
