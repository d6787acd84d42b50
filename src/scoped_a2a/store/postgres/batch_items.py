"""The batch writer's pieces that hold no state of its own (appends.py): a queued event
(:class:`Item`), how queued events are taken into one statement (:func:`take`), and that
statement's parameters (:func:`parameters`: one small JSON array of the tasks, and every
event body and due snapshot in one ``bytea``, :class:`Bodies`, which the grouped creates and
ends share: grouped.py). No I/O; nothing here raises.
"""

from __future__ import annotations

from collections import deque
from itertools import accumulate

import anyio
import msgspec

from ...protocol.types import Task, TaskStatus
from ..base import LogEntry

_encode = msgspec.json.Encoder().encode


class Bodies:
    """Byte strings sent as one ``bytea`` parameter, which a statement slices with ``substr``
    (psycopg's adaptation of a list to an array costs more CPU than the statement:
    append_sql.BATCH)."""

    __slots__ = ("at", "parts")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.at = 1  # where the next one starts (1-based, as substr counts)

    def add(self, *data: bytes) -> int:
        """Append ``data`` (consecutive); where the first starts."""
        at = self.at
        for d in data:
            self.parts.append(d)
            self.at += len(d)
        return at

    def extend(self, data: list[bytes]) -> list[int]:
        """Append ``data``; where each starts."""
        offs = list(accumulate(map(len, data), initial=self.at))
        self.at = offs.pop()
        self.parts += data
        return offs

    def joined(self) -> bytes:
        return b"".join(self.parts)


class Row(msgspec.Struct, omit_defaults=True):
    """One task's events in a batch (append_sql.BATCH reads these names; one left out is
    NULL there)."""

    id: str
    n: int
    bytes: int
    kinds: list[int]
    offs: list[int]
    lens: list[int]
    soff: int | None = None  # the new snapshot's offset and length in the bytea, if one is due
    slen: int | None = None
    state: str | None = None
    ts: str | None = None
    token: str | None = None
    expect: int | None = None


class Item:
    __slots__ = ("done", "entry", "error", "expect", "id", "kind", "status", "token",
                 "waited")

    def __init__(self, task_id: str, kind: int, entry: LogEntry, status: TaskStatus | None,
                 token: str | None, expect: int | None, waited: bool) -> None:
        # ``entry.position``: set once known; 0 if the statement skipped it (full path).
        self.id, self.kind, self.entry = task_id, kind, entry
        self.status, self.token = status, token  # (a status update's new status)
        self.expect = expect  # the position it must take (None: whatever is next)
        self.waited = waited  # its caller waits for the commit
        # Set once written or failed; only a waiting caller needs one (most are not waited).
        self.done: anyio.Event | None = None  # (set by put for a waited one)
        self.error: BaseException | None = None


def take(queue: deque[Item], max_tasks: int, max_group: int
         ) -> tuple[list[list[Item]], deque[Item]]:
    """The queued events to write now, by task, and what stays queued: each task's queued
    events at consecutive known positions (at most ``max_group``; or its first one, position
    unknown), at most ``max_tasks`` tasks, in queue order."""
    groups: dict[str, list[Item]] = {}
    closed: set[str] = set()  # a task whose next event must wait for the next batch
    later: deque[Item] = deque()
    count = 0
    for item in queue:
        group = groups.get(item.id)
        if item.id in closed or (group is None and count >= max_tasks):
            later.append(item)
            closed.add(item.id)
        elif group is None:
            groups[item.id] = [item]
            count += 1
            if item.expect is None:
                closed.add(item.id)
        elif (item.expect is not None and group[-1].expect is not None
              and item.expect == group[-1].expect + 1 and item.token == group[0].token
              and len(group) < max_group):
            group.append(item)
        else:
            later.append(item)
            closed.add(item.id)
    return list(groups.values()), later


def parameters(batch: list[list[Item]], snaps: list[tuple[Task | None, bytes | None]]
               ) -> tuple[str, bytes]:
    """The batch statement's tasks (JSON text) and bodies (each group's events, then its
    snapshot where ``snaps`` has one to write)."""
    rows = []
    bodies = Bodies()
    for group, (_, snap) in zip(batch, snaps, strict=True):
        first = group[0]
        status = next((i.status for i in reversed(group) if i.status is not None), None)
        mine = [item.entry.encoded for item in group]
        start = bodies.at
        offs = bodies.extend(mine)
        soff = slen = None
        if snap is not None:
            soff, slen = bodies.add(snap), len(snap)
        rows.append(Row(first.id, len(group), bodies.at - start, [i.kind for i in group], offs,
                        list(map(len, mine)), soff, slen, status.state.value if status else None,
                        status.timestamp if status else None, first.token, first.expect))
    return _encode(rows).decode(), bodies.joined()
