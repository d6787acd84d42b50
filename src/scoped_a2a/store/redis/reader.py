"""The read path of the Redis task store: pages of a task's log, and waiting for new entries.

Round trips (:mod:`.local`). This process keeps the entries it appended or read and the snapshot
it last saw: a read that they answer entirely (as far as the process can know,
:meth:`.local.LocalView.page`) asks nothing; otherwise it asks Redis only for the entries after
those, and for the snapshot only if it differs (a digest is sent). A task's channel is
subscribed to by its first waiting reader; a wait asks nothing once the subscription is
confirmed: the channel carries each new position, so a wake-up that brings nothing new sends the
reader back to sleep instead of to Redis. A wait also re-checks every ``poll_interval`` seconds
in case a notification was lost while Redis was unreachable.

Cancellation: a read or wait cancelled midway changes nothing but what this process knows
(:mod:`.local`), which stays true. Errors: TaskNotFound for an unknown task, ServerUnavailable
when Redis is unreachable (:meth:`.connection.RedisConnection.call`).
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import anyio
import msgspec

from ...protocol.errors import TaskNotFound
from ..base import LogEntry, LogPage
from ..records import DECODERS
from . import scripts
from .connection import RedisConnection
from .writer import LogWriter

# A stream entry keeps its event's kind (records.py) as a one-byte string.
_DECODERS: dict[bytes, msgspec.json.Decoder[Any]] = {bytes((k,)): d for k, d in DECODERS.items()}


def _entry(raw: Any) -> LogEntry:
    """A stream entry ``[b"<pos>-0", [b"k", kind, b"e", json]]`` as a LogEntry."""
    entry_id, fields = raw
    values = dict(zip(fields[::2], fields[1::2], strict=True))
    encoded = bytes(values[b"e"])
    event = _DECODERS[values[b"k"]].decode(encoded)
    return LogEntry(int(entry_id.split(b"-")[0]), event, encoded)


class _Store(Protocol):
    """What the reader needs of its :class:`.store.RedisTaskStore` (read when used: a test may
    change ``poll_interval`` on a store already open)."""

    conn: RedisConnection
    writer: LogWriter
    max_events_per_task: int
    poll_interval: float


class LogReader:
    """The reads of one :class:`.store.RedisTaskStore` (see the module docstring)."""

    def __init__(self, store: _Store) -> None:
        self.store = store
        self.conn = store.conn
        self.keys = store.conn.keys
        self.local = store.conn.local
        self._script = store.conn.script(scripts.READ)

    async def read(
        self, task_id: str, after: int, *, max_events: int = 1000, max_bytes: int = 1 << 20
    ) -> LogPage:
        max_events = max(1, max_events)
        local = self.local.page(task_id, after, max_events, max_bytes,
                               self.store.max_events_per_task)
        if local is not None:  # all there is, as far as this process can know (.local)
            entries, last, task, first = local
            nxt = entries[-1].position if entries else max(after, first - 1)
            return LogPage(entries, nxt, nxt < last, task, first)
        held, size, full = self.local.held(task_id, after, max_events, max_bytes)
        page = await self._read(task_id, after, max_events, max_bytes, held, size, full)
        if page is None:  # what was held no longer applies: read it all from Redis
            page = await self._read(task_id, after, max_events, max_bytes, [], 0, False,
                                    reuse=False)
        assert page is not None  # holding nothing and reusing nothing, a READ always answers
        return page

    async def _read(
        self, task_id: str, after: int, max_events: int, max_bytes: int,
        held: list[LogEntry], size: int, full: bool, *, reuse: bool = True,
    ) -> LogPage | None:
        """One READ: the entries after ``held`` (none if ``full``), the position, and the
        snapshot unless Redis holds the one this process has (``reuse``). None: read again,
        holding nothing and reusing nothing.
        """
        start = f"{(held[-1].position if held else max(after, 0)) + 1}-0"
        digest = self.local.digest(task_id) if reuse else ""
        keys = [self.keys.task(task_id), self.keys.log(task_id)]
        tick = self.conn.tick()
        raw = await self.conn.run(
            self._script, keys, [start, 0 if full else max_events - len(held), digest]
        )
        if raw is None:
            self.local.forget(task_id)
            raise TaskNotFound(f"task {task_id!r} not found")
        snap, last_raw, stream = cast("list[Any]", raw)
        last = int(last_raw)
        if held and held[0].position <= last - self.store.max_events_per_task:
            return None  # the log's cap dropped some of them: say so, as Redis would
        self.local.saw(task_id, last, tick)
        self.local.snapshot_is(task_id, bytes(snap) if snap else None, last)
        task = self.local.snapshot(task_id)
        if task is None:
            return None  # forgotten meanwhile (evicted, unsubscribed): no snapshot to reuse
        new: list[LogEntry] = []
        for item in stream:
            entry = _entry(item)
            size += len(entry.encoded)
            # The first entry is always returned, whatever its size.
            if (held or new) and size > max_bytes:
                break
            new.append(entry)
        self.local.read(task_id, new)
        entries = held + new
        nxt = entries[-1].position if entries else after
        first = entries[0].position if entries else after + 1
        return LogPage(entries, nxt, nxt < last, task, first)

    async def wait(self, task_id: str, after: int) -> None:
        # Returning early is harmless (the reader re-reads); the poll covers notifications
        # lost while the listener was reconnecting.
        with anyio.move_on_after(self.store.poll_interval):
            while True:
                with self.conn.waiters.watching(task_id) as woken:
                    await self.conn.watch(task_id)  # subscribed before the check: no lost wake-up
                    last = self.local.known_last(task_id)
                    if last is None and self.store.writer.verifies(task_id):
                        # Not sure of it here, but this process's next write of the task is
                        # sent after the subscription's confirmation: its reply makes sure
                        # (.local) and wakes this waiter; a round trip of its own is spared.
                        # (Woken by anything else first, e.g. the confirmation: check again.)
                        await woken.wait()
                        continue
                    if last is None:  # not sure of it here: ask (and be sure from now on)
                        tick = self.conn.tick()
                        raw = await self.conn.call(
                            lambda: self.conn.client.hget(self.keys.task(task_id), "last")
                        )
                        if raw is None:
                            raise TaskNotFound(f"task {task_id!r} not found")
                        last = int(raw)
                        self.local.saw(task_id, last, tick)
                    if last > after:
                        return
                    await woken.wait()
                # A wake-up known to carry nothing after ``after`` (an append this process had
                # read already, announced on its channel) sends the reader back to sleep, not
                # to Redis. (The announcements of this process's own appends wake nobody.)
                known = self.local.known_last(task_id)
                if known is None or known > after:
                    return
