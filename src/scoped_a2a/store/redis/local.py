"""What one process knows of its tasks without asking Redis (no I/O here).

Every reader wake-up used to cost three things: a read of the log that carried the whole
snapshot (decoded again each time), the entries (decoded again by every reader), and before
sleeping again a check of the task's position. This module keeps what the process already
knows, so that a read asks Redis only for what is new, and a wait asks nothing at all.

Entries are facts: the entry at a position never changes. The entries this process appended or
read are kept (recent ones, contiguous), and a read asks Redis only for the entries after them.
The snapshot the process holds is sent to Redis as a digest; Redis returns the snapshot only if
it differs. A read whose whole answer is held (:meth:`LocalView.page`: every entry up to the
task's verified last position, and the snapshot at it) asks nothing: as on PostgreSQL, a write
another process had acknowledged is then seen once its announcement arrives (milliseconds).

Waits need no such round trip. Let a subscription to a task's channel be confirmed by Redis at
tick S, and a command (a read, a create, or an append's compare-and-set) be sent at tick T > S
and see the task at position P. Every append Redis executed before that command is at most P;
every append it executes afterwards is published on the channel, and this process hears it
(later, and then wakes its waiters). So a waiter at ``max(P, positions heard)`` may sleep
without asking Redis: any newer append will wake it. Ticks are this process's own counter
(:meth:`.connection.RedisConnection.tick`); a confirmation only counts while the listener's
connection is the one it was made on (coredis resubscribes after a reconnect, but messages
published meanwhile are lost), and is dropped when the channel is unsubscribed.

Memory: at most ``MAX_TASKS`` tasks (least recently used forgotten first), ``MAX_ENTRIES``
recent entries each; a task is also forgotten when its channel is unsubscribed or it is evicted.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from itertools import islice

from ...protocol.types import Task
from ..base import LogEntry
from ..records import decode_task

MAX_TASKS = 1024
MAX_ENTRIES = 128



class _TaskView:
    __slots__ = ("_decoded", "_digest", "entries", "heard", "own", "snap", "snap_at",
                 "verified")

    def __init__(self) -> None:
        self.entries: deque[LogEntry] = deque(maxlen=MAX_ENTRIES)  # contiguous positions
        self.snap: bytes | None = None  # the latest snapshot this process has seen
        self.snap_at = -1  # the position ``snap`` is the task at (-1: not known)
        self._digest: str | None = None
        self._decoded: Task | None = None
        self.verified: tuple[int, int] | None = None  # (confirmation tick, position)
        self.heard = -1  # the highest position announced on the task's channel
        self.own = -1  # the highest position this process appended (its waiters were woken)

    def set_snapshot(self, snap: bytes, position: int) -> None:
        if snap != self.snap:
            self.snap, self._digest, self._decoded = snap, None, None
        self.snap_at = position

    def digest(self) -> str:
        if self._digest is None:
            # Equality only (Redis has sha1hex in Lua), no secret involved.
            self._digest = hashlib.sha1(self.snap or b"", usedforsecurity=False).hexdigest()
        return self._digest

    def snapshot(self) -> Task:
        if self._decoded is None:
            assert self.snap is not None
            self._decoded = decode_task(self.snap)
        return self._decoded


class LocalView:
    """Recent entries, snapshots and verified positions of the tasks this process follows.

    ``confirmed_at(task_id)`` is the tick at which the task's channel subscription was
    confirmed on the listener's current connection, or None.
    """

    def __init__(self, confirmed_at: Callable[[str], int | None]) -> None:
        self._confirmed_at = confirmed_at
        self._tasks: OrderedDict[str, _TaskView] = OrderedDict()

    def _view(self, task_id: str) -> _TaskView:
        view = self._tasks.get(task_id)
        if view is None:
            view = self._tasks[task_id] = _TaskView()
            if len(self._tasks) > MAX_TASKS:
                self._tasks.popitem(last=False)
        else:
            self._tasks.move_to_end(task_id)
        return view

    def forget(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)

    # --- what was learnt ------------------------------------------------------------------

    def saw(self, task_id: str, position: int, tick: int) -> None:
        """A command sent at ``tick`` saw the task at ``position``."""
        confirmed = self._confirmed_at(task_id)
        if confirmed is None or tick <= confirmed:
            return
        view = self._view(task_id)
        if view.verified is not None and view.verified[0] == confirmed:
            position = max(position, view.verified[1])
        view.verified = (confirmed, position)

    def heard(self, task_id: str, position: int) -> bool:
        """The task's channel announced an append at ``position``; whether that is news to
        this process's waiters (False: this process appended it and woke them then: the
        announcement of its own writes wakes nobody a second time)."""
        view = self._tasks.get(task_id)
        if view is None:
            return True
        view.heard = max(view.heard, position)
        return position > view.own

    def snapshot_is(self, task_id: str, snap: bytes | None, position: int) -> None:
        """Redis held ``snap`` as the task's snapshot at ``position`` (a create, or a read);
        None: the one held here (a read found it unchanged)."""
        view = self._view(task_id)
        if snap is not None:
            view.set_snapshot(snap, position)
        elif view.snap is not None:
            view.snap_at = position

    def appended(self, task_id: str, entries: Sequence[LogEntry], snap: bytes, tick: int
                 ) -> None:
        """This process appended ``entries`` (consecutive, in one command sent at ``tick``);
        ``snap``: the snapshot after the last of them (b"": unchanged, trajectory events)."""
        view = self._view(task_id)
        first, last = entries[0].position, entries[-1].position
        if not (view.entries and view.entries[-1].position == first - 1):
            view.entries.clear()
        view.entries.extend(entries)
        view.own = max(view.own, last)
        if snap:
            view.set_snapshot(snap, last)
        elif view.snap_at == first - 1:
            view.snap_at = last  # (trajectory events leave the snapshot as it is)
        else:
            view.snap_at = -1
        self.saw(task_id, last, tick)

    def read(self, task_id: str, entries: Sequence[LogEntry]) -> None:
        """Entries read from Redis (consecutive positions), kept if they extend what is held."""
        if not entries:
            return
        view = self._view(task_id)
        held = view.entries
        if held and held[0].position <= entries[0].position <= held[-1].position + 1:
            last = held[-1].position
            held.extend(e for e in entries if e.position > last)
        elif not held or entries[0].position > held[-1].position:
            held.clear()
            held.extend(entries)

    # --- answering ------------------------------------------------------------------------

    def known_last(self, task_id: str) -> int | None:
        """A position no append newer than can happen unheard (module docstring), or None."""
        view = self._tasks.get(task_id)
        if view is None or view.verified is None:
            return None
        if self._confirmed_at(task_id) != view.verified[0]:
            return None
        return max(view.verified[1], view.heard)

    def held(self, task_id: str, after: int, max_events: int, max_bytes: int
             ) -> tuple[list[LogEntry], int, bool]:
        """Held entries after ``after`` within the bounds: (entries, their bytes, bounds hit)."""
        view = self._tasks.get(task_id)
        if view is None or not view.entries or not (
            view.entries[0].position <= after + 1 <= view.entries[-1].position
        ):
            return [], 0, False
        out: list[LogEntry] = []
        size = 0
        for entry in islice(view.entries, after + 1 - view.entries[0].position, None):
            size += len(entry.encoded)
            # The first entry is always returned, whatever its size.
            if out and (len(out) >= max_events or size > max_bytes):
                return out, size - len(entry.encoded), True
            out.append(entry)
        return out, size, len(out) >= max_events or size >= max_bytes

    def page(self, task_id: str, after: int, max_events: int, max_bytes: int, cap: int
             ) -> tuple[list[LogEntry], int, Task, int] | None:
        """The page after ``after`` from what is held, when that is the whole log as far as
        this process can know: it holds every entry from ``after`` to the task's known last
        position (:meth:`known_last`: no later append can have happened unheard, except one
        whose announcement is on its way) and the snapshot at that position. Returns
        (entries, last position, snapshot, first position the log keeps); None: ask Redis.
        ``cap``: the log's length limit (entries before ``last - cap`` are gone from Redis).
        """
        view = self._tasks.get(task_id)
        last = self.known_last(task_id)
        if view is None or last is None or view.snap is None or view.snap_at != last:
            return None
        held = view.entries
        if last > after and not (held and held[0].position <= after + 1
                                 and held[-1].position == last):
            return None
        first = max(1, last - cap + 1)
        out: list[LogEntry] = []
        size = 0
        if last > after:
            start = max(after + 1, first) - held[0].position
            for entry in islice(held, max(start, 0), None):
                size += len(entry.encoded)
                if out and (len(out) >= max_events or size > max_bytes):
                    break  # the first entry is always returned
                out.append(entry)
        return out, last, view.snapshot(), first

    def digest(self, task_id: str) -> str:
        """The digest of the snapshot held ("" if none): Redis sends it only if it differs."""
        view = self._tasks.get(task_id)
        return view.digest() if view is not None and view.snap is not None else ""

    def snapshot(self, task_id: str) -> Task | None:
        """The snapshot held, decoded once and shared by every reader (do not change it)."""
        view = self._tasks.get(task_id)
        return view.snapshot() if view is not None and view.snap is not None else None
