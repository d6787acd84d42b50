"""What the console knows of runs: those in flight, the recently ended, and ends per minute.

:class:`RunHub` is the runner's watch (:class:`scoped_a2a.runtime.run.RunWatch`): the runner
tells it as runs start, are held and released, append to their log and end. It keeps, in this
process's memory and bounded:

- each run in flight: owner, mode and why, holders by kind, state, its log's last position;
- the last :data:`MAX_ENDED` ended runs: state, end reason, duration, who cancelled;
- per run, its last :data:`MAX_MARKS` *marks* (holders coming and going, start, end), each
  tagged with the log position it followed, so a timeline can interleave them with the log;
- the number of ends per (minute, owner, reason) over the last :data:`WINDOW_MINUTES` minutes.

Readers wait for a change with :meth:`RunHub.wait_changed` (any run) or
:meth:`RunHub.wait_task` (one task). The events they wait on are created by the first waiter
and dropped when set, so with no console page open a hook costs a few dict operations.
Everything here is synchronous except the waits, which cancellation ends at once.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import anyio

from ...protocol.principal import TENANT_SEPARATOR
from ...protocol.trajectory import LogEvent
from ...protocol.types import TaskState, TaskStatusUpdateEvent
from ...runtime.run import HOLD_KINDS, Run

MAX_ENDED = 1000
"""Ended runs kept for the console (oldest dropped first)."""

MAX_MARKS = 64
"""Marks (holders coming and going, start, end) kept per run."""

WINDOW_MINUTES = 15
"""Minutes of ends-per-reason counts kept for the chart."""

AFTER_ALL = math.inf
"""The log position an end mark follows: after everything the run wrote, its end included."""


def split_owner(owner: str) -> tuple[str, str]:
    """``(principal id, tenant)`` of a task's owner key (the tenant is "" without one)."""
    principal, _, tenant = owner.partition(TENANT_SEPARATOR)
    return principal, tenant


_STATE_NAMES = {state: state.name.lower().replace("_", "-") for state in TaskState}


def state_name(state: TaskState) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required``: what the page shows."""
    return _STATE_NAMES[state]


@dataclass(slots=True)
class Mark:
    """Something that happened to a run outside its log (a hold, its start, its end)."""

    seq: int
    at: float  # wall-clock seconds
    after: float  # the log position it followed (AFTER_ALL: after the run's end)
    kind: str  # "hold" | "release" | "start" | "end"
    # What the text is made of (made when read: marks are many, reads few): the holder's
    # kind, the detach reason (start), or (state, reason, canceled by) (end).
    detail: Any = None
    holders: tuple[int, ...] | None = None  # after a hold or release, in HOLD_KINDS order

    def to_json(self) -> dict[str, Any]:
        kind, detail = self.kind, self.detail
        if kind == "hold":
            text = f"{detail} took a hold"
        elif kind == "release":
            text = f"{detail} let go"
        elif kind == "start":
            mode = (f"detached ({detail})" if detail is not None
                    else "interactive: ends when its last holder goes")
            text = f"run started, {mode}"
        else:
            state, reason, by = detail
            text = f"run ended: {state}, reason {reason}" + (f" by {by}" if by else "")
        item: dict[str, Any] = {"kind": "holder" if kind in ("hold", "release") else "run",
                                "mark": kind, "at": round(self.at * 1000), "text": text}
        if self.holders is not None:
            item["holders"] = dict(zip(HOLD_KINDS, self.holders, strict=False))
        return item


@dataclass(slots=True)
class RunView:
    """One run as the console shows it, in flight or ended."""

    task_id: str
    context_id: str
    owner: str  # the owner key
    detach_reason: str | None
    started_at: float  # wall-clock seconds
    holders: dict[str, int] = field(default_factory=lambda: dict.fromkeys(HOLD_KINDS, 0))
    state: str = "submitted"
    events: int = 0
    last_position: int = 0
    marks: deque[Mark] = field(default_factory=lambda: deque(maxlen=MAX_MARKS))
    mark_seq: int = 0
    # Set once ended:
    ended_at: float | None = None
    seconds: float | None = None
    reason: str | None = None
    canceled_by: str | None = None
    seq: int = 0  # order of ending (the stream sends ended runs it has not sent yet)

    def mark(self, kind: str, detail: Any = None, *, after: float | None = None,
             holders: tuple[int, ...] | None = None) -> None:
        self.mark_seq += 1
        self.marks.append(Mark(self.mark_seq, time.time(),
                               self.last_position if after is None else after, kind, detail,
                               holders))

    def to_json(self, now: float, run: Run | None = None) -> dict[str, Any]:
        if run is not None:  # a follow-up message may have detached it since it started
            self.detach_reason = run.detach_reason
        principal, tenant = split_owner(self.owner)
        item: dict[str, Any] = {
            "taskId": self.task_id, "contextId": self.context_id,
            "owner": principal, "tenant": tenant,
            "mode": "detached" if self.detach_reason is not None else "interactive",
            "why": self.detach_reason,
            "state": self.state,
            "startedAt": round(self.started_at * 1000),
            "events": self.events,
        }
        if self.ended_at is None:
            item["holders"] = dict(self.holders)
            item["ageSeconds"] = round(now - self.started_at, 3)
            if run is not None:
                item["parked"] = run.parked
                item["cancelling"] = run.cancel_reason
        else:
            item.update(endedAt=round(self.ended_at * 1000), durationSeconds=self.seconds,
                        reason=self.reason, canceledBy=self.canceled_by)
        return item


class RunHub:
    """The runner's watch for the console (see the module docstring)."""

    def __init__(self, *, max_ended: int = MAX_ENDED) -> None:
        self.live: dict[str, tuple[Run, RunView]] = {}
        self.ended_runs: OrderedDict[str, RunView] = OrderedDict()
        self.max_ended = max_ended
        self.ended_seq = 0
        self.version = 0
        # (minute, owner key) -> reason -> count; minutes older than the window are dropped.
        self.counts: dict[tuple[int, str], dict[str, int]] = {}
        self._changed: anyio.Event | None = None
        self._task_changed: dict[str, anyio.Event] = {}
        self.closed = False
        """The server is shutting down: feeds end once no run is left (see :meth:`closing`)."""

    # --- the watch hooks (runtime/run.py RunWatch) --------------------------------------------

    def started(self, run: Run) -> None:
        view = RunView(run.task_id, run.context_id, run.owner, run.detach_reason, time.time())
        view.mark("start", run.detach_reason)
        self.live[run.task_id] = (run, view)
        self._touch(run.task_id)

    def held(self, run: Run, kind: str, delta: int) -> None:
        entry = self.live.get(run.task_id)
        view = entry[1] if entry is not None else self.ended_runs.get(run.task_id)
        if view is None:
            return
        # After the end (a blocking send answered), the release still shows on the timeline.
        after = None if entry is not None else AFTER_ALL
        holders = view.holders
        holders[kind] = max(holders.get(kind, 0) + delta, 0)
        view.mark("hold" if delta > 0 else "release", kind, after=after,
                  holders=tuple(holders.values()))
        self._touch(run.task_id)

    def appended(self, run: Run, event: LogEvent, position: int) -> None:
        entry = self.live.get(run.task_id)
        if entry is None:
            return
        view = entry[1]
        view.events += 1
        view.last_position = max(view.last_position, position)
        if isinstance(event, TaskStatusUpdateEvent):
            view.state = state_name(event.status.state)
            self._touch(run.task_id)
        else:  # a trajectory event or an artifact: wake this task's timelines only
            self._touch_task(run.task_id)

    def ended(self, run: Run, state: str, reason: str, seconds: float) -> None:
        entry = self.live.pop(run.task_id, None)
        if entry is None:
            return
        view = entry[1]
        view.detach_reason = run.detach_reason
        view.state, view.reason, view.seconds = state, reason, round(seconds, 3)
        view.ended_at = time.time()
        view.canceled_by = run.canceled_by if state == "canceled" else None
        view.mark("end", (state, reason, view.canceled_by), after=AFTER_ALL)
        self.ended_seq += 1
        view.seq = self.ended_seq
        self.ended_runs[run.task_id] = view
        while len(self.ended_runs) > self.max_ended:
            self.ended_runs.popitem(last=False)
        minute = int(view.ended_at // 60)
        per_reason = self.counts.setdefault((minute, view.owner), {})
        per_reason[reason] = per_reason.get(reason, 0) + 1
        if len(self.counts) > 4096:  # many owners: prune now rather than at the next read
            self._prune(minute)
        self._touch(run.task_id)

    def closing(self) -> None:
        """Wake every feed: from now on each ends once no run is left (after showing how the
        last ones ended), so an open page does not hold the server's graceful shutdown open
        until its timeout."""
        self.closed = True
        self.version += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        for event in self._task_changed.values():
            event.set()
        self._task_changed.clear()

    # --- reading --------------------------------------------------------------------------

    def view(self, task_id: str) -> tuple[Run | None, RunView] | None:
        """A run in flight (with its Run) or recently ended (Run None); None if unknown."""
        entry = self.live.get(task_id)
        if entry is not None:
            return entry
        view = self.ended_runs.get(task_id)
        return None if view is None else (None, view)

    def reason_counts(self, visible: Any, now: float) -> list[dict[str, Any]]:
        """Ends per reason for each of the last WINDOW_MINUTES minutes (oldest first), of the
        owners ``visible(owner_key)`` accepts."""
        current = int(now // 60)
        self._prune(current)
        minutes: list[dict[str, Any]] = []
        for minute in range(current - WINDOW_MINUTES + 1, current + 1):
            minutes.append({"start": minute * 60 * 1000, "reasons": {}})
        first = current - WINDOW_MINUTES + 1
        for (minute, owner), per_reason in self.counts.items():
            if minute < first or not visible(owner):
                continue
            reasons = minutes[minute - first]["reasons"]
            for reason, n in per_reason.items():
                reasons[reason] = reasons.get(reason, 0) + n
        return minutes

    def _prune(self, current_minute: int) -> None:
        first = current_minute - WINDOW_MINUTES + 1
        for key in [k for k in self.counts if k[0] < first]:
            del self.counts[key]

    # --- waiting for changes --------------------------------------------------------------

    async def wait_changed(self, version: int) -> None:
        """Return once a run started, ended, was held or released, or changed state after
        ``version`` (at once if that already happened)."""
        if self.version != version:
            return
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def wait_task(self, task_id: str) -> None:
        """Return at the next change of ``task_id``'s run (a log event, a hold, its end), or
        when the server begins shutting down."""
        event = self._task_changed.get(task_id)
        if event is None:
            event = self._task_changed[task_id] = anyio.Event()
        await event.wait()

    def _touch(self, task_id: str) -> None:
        self.version += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        self._touch_task(task_id)

    def _touch_task(self, task_id: str) -> None:
        if self._task_changed:
            event = self._task_changed.pop(task_id, None)
            if event is not None:
                event.set()
