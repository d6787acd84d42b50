"""What one process holds of the tasks it writes and reads (core.py, store.py): decoded
snapshots at known positions, the entries it appended, the ends it committed.

A snapshot held here saves a query its bytes (the database sends it only when the position
moved) and, with the entries this process appended, answers the reads of the streams whose
runs are here (store.py, ``_read_local``: only while nothing later was announced). Entries are
kept only as consecutive runs of positions. Everything is bounded (:data:`CACHE` tasks,
:data:`LOCAL_EVENTS` entries each) and forgotten at once when a connection breaks mid-operation
(:meth:`LocalState.forget_local`).

Ended tasks. The decoded snapshot and entries of a task that ended here are kept only for the
last :data:`ENDED_HELD` ends (its readers here read its end within milliseconds of its
commit), then dropped: decoded events are objects the cyclic collector walks at every full
collection, and 1,024 tasks of up to 256 entries each made those walks (and the memory
trimmer's ``gc.collect()``) cost 1-2% of a streaming server's CPU where the memory store, which
keeps ended tasks as bytes, paid nothing. An ended task's later reads go to the database (its
bytes: :meth:`LocalState.ended_json` still answers a blocking send).
"""

from __future__ import annotations

from collections import OrderedDict, deque

from ...protocol.errors import ServerUnavailable
from ...protocol.types import Task
from ..base import LogEntry
from ..records import decode_task
from ..snapshot import folded
from .listener import Waiters

CACHE = 1024  # snapshots (decoded) of tasks recently written or read here
LOCAL_EVENTS = 256  # entries kept of each task this process appends to (reads skip the trip)
ENDED_HELD = 64  # ended tasks whose decoded snapshot and entries are still kept (see above)


class LocalState:
    """Snapshots, entries and ends this process holds (a part of :class:`.core.PostgresCore`)."""

    waiters: Waiters

    def __init__(self) -> None:
        self._cache: OrderedDict[str, tuple[Task, int]] = OrderedDict()
        self._local: OrderedDict[str, deque[LogEntry]] = OrderedDict()
        self._ended: OrderedDict[str, bytes] = OrderedDict()  # ends written here (ended_json)
        self._ended_held: deque[str] = deque()  # ended here, decoded state still kept

    def forget_local(self) -> None:
        """A connection broke mid-operation: a commit of this process may have been announced
        and not learned here (its notification was ignored as this process's own: listener.py),
        so what this process holds answers no more reads until learned again."""
        self._cache.clear()
        self._local.clear()

    def _remember(self, task_id: str, task: Task, pos: int) -> None:
        self._cache[task_id] = (task, pos)
        self._cache.move_to_end(task_id)
        if len(self._cache) > CACHE:
            self._cache.popitem(last=False)

    def _held(self, task_id: str) -> tuple[Task | None, int]:
        """The cached snapshot of ``task_id`` and its position (None, -1 if none): a query
        skips sending the snapshot when the position is still this one."""
        held = self._cache.get(task_id)
        return held if held is not None else (None, -1)

    def _snapshot(self, task_id: str, snap: bytes | None, pos: int,
                  held: tuple[Task | None, int]) -> Task:
        """The snapshot at ``pos``: ``snap`` decoded, or ``held`` (taken before the query)
        when ``snap`` is None (the database skipped sending what this process held)."""
        if snap is None and held[0] is not None and held[1] == pos:
            return held[0]
        if snap is None:  # cannot happen: the query sends it unless the position was held's
            raise ServerUnavailable("the task store lost track of a snapshot; try again")
        task = decode_task(snap)
        if pos >= self._held(task_id)[1]:
            self._remember(task_id, task, pos)
        return task

    def ended_json(self, task_id: str) -> bytes | None:
        """The ended snapshot of ``task_id`` if this process committed its end (recently): a
        terminal task refuses every write, so it is what the database holds (a blocking
        send's answer needs no read)."""
        return self._ended.get(task_id)

    def _ended_at(self, task_id: str, snap: bytes) -> None:
        self._ended[task_id] = snap
        if len(self._ended) > CACHE:
            self._ended.popitem(last=False)

    def _ended_here(self, task_id: str) -> None:
        """``task_id``'s end committed here (its entries and snapshot kept): the decoded state
        of the end :data:`ENDED_HELD` before it is dropped (module docstring)."""
        self._ended_held.append(task_id)
        if len(self._ended_held) > ENDED_HELD:
            old = self._ended_held.popleft()
            self._local.pop(old, None)
            self._cache.pop(old, None)

    def _fold(self, task_id: str, first: int, entries: list[LogEntry]) -> Task | None:
        """The snapshot after ``entries`` (from ``first`` on), folded into the one held at
        ``first - 1``, which stays as it was (a reader may hold it); None if none is held
        there. The batch writer calls it before the entries are written (appends.py): the
        snapshot is written with them when one is due, and held once they are committed."""
        held = self._cache.get(task_id)
        if held is None or held[1] != first - 1:
            return None
        return folded(held[0], [entry.event for entry in entries])

    def _committed(self, task_id: str, first: int, entries: list[LogEntry],
                   task: Task | None) -> None:
        """Batched entries of ``task_id`` committed at ``first`` and on, ``task`` the
        snapshot after them (None: not known here): hold it, keep the entries for local
        reads, wake the readers here once."""
        last = first + len(entries) - 1
        if task is not None:
            self._remember(task_id, task, last)
        else:
            self._cache.pop(task_id, None)
        self._keep(task_id, first, entries)
        self.waiters.saw(task_id, last)

    def _keep(self, task_id: str, first: int, new: list[LogEntry]) -> None:
        """Keep entries this process appended from ``first`` on, for ``_read_local``
        (consecutive only)."""
        entries = self._local.get(task_id)
        if entries is None or entries[-1].position != first - 1:
            entries = self._local[task_id] = deque(maxlen=LOCAL_EVENTS)
        self._local.move_to_end(task_id)
        entries.extend(new)
        if len(self._local) > CACHE:
            self._local.popitem(last=False)
