"""Group commit: concurrent synchronous single-statement writes of one kind share statements.

A new task's create with its claim and a task's end (core.py) each commit synchronously: a
WAL flush (about 5 ms on this machine's disk) per statement, and per statement this process
pays a pool slot, a round trip with its socket waits and result parsing, and the database a
parse/bind/execute/commit. Under load, many of them are under way at once. A
:class:`GroupCommit` lets them share: each caller queues its item, and a caller that finds
fewer than :data:`IN_FLIGHT` statements of its kind under way leads one, which takes every
item queued at that moment (:data:`MAX_ITEMS` at most) and writes them in one multi-row
statement with one synchronous commit; each caller then gets its own outcome. A leader whose
own item is written hands the lead to the first item still queued, so what arrived during a
statement goes in the next one.

Latency. Nothing waits to fill a batch: a caller alone leads at once and writes its item by
the single statement it always used (the kind's ``one``); the multi-row statement (``many``)
is only for two items or more. Why one statement of a kind at a time (:data:`IN_FLIGHT`), not
a few: a commit arriving during another's WAL flush waits for that flush to end and then for
its own (PostgreSQL merges the flushes of commits waiting together, not those of commits
arriving during one), so a second statement in flight gains an item about the statement's
execution time (a fraction of a millisecond), while with one in flight everything arriving
during a flush shares the next statement. Measured side by side (docs/postgres.md, sixth
pass): 1 in flight cost the least CPU per send, here and in the database, and gave the most
sends per second; 2, 3 and 6 batched less. A statement that waits for a lock held elsewhere
(another replica's transaction on the same claim key, perhaps frozen with its process) must
not hold every create of this process behind it: once no statement of the kind has started
or ended for :data:`STALLED` seconds, the next caller (or the head of the queue, the only
waiter with a deadline) starts another.

Outcomes. ``True``/``False`` per item (the kind says what: claimed and stored, or written; or
not), or ``None``: write it alone on the single path. Two items sharing a key (a claim's key,
a task id: :attr:`Item.keys`) never go in one statement: the later one waits for the next.
An error of the whole statement that may be one item's fault (a unique violation, a check, a
deadlock between replicas' statements) is no answer for the others: each of its items gets
``None`` and its caller runs the single path, which raises that item's own error.
ServerUnavailable (the database cannot be used) and OutcomeUnknown (the connection was lost
while the statement committed: every item of it may or may not be stored) go to every item of
the statement, each caller its own copy.

Durability: a caller is answered only after its statement's synchronous commit.

Cancellation, as for a single statement run by the pool (connection.py: shielded to its
commit, the caller sees the cancel afterwards): a caller cancelled while its item is queued and
not taken removes it (nothing stored, the cancel raised); once taken, it is stored or not as
its statement goes, and the caller gets that outcome (or error) when the statement ends, the
cancel being raised at its next checkpoint (anyio's cancellation is level-triggered on both
backends). So a create that stored a task always returns, and its caller records the run it
will not start (runtime/runner.py), as before. A lead handed to a caller cancelled meanwhile
passes to the next queued item.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio
import psycopg

from ...protocol.errors import ServerUnavailable
from .connection import Conn, Pool

IN_FLIGHT = 1
"""Statements of one kind under way at once, unless stalled (docs/postgres.md, sixth pass)."""
STALLED = 0.25
"""Seconds without a statement of the kind starting or ending after which one more may start
(module docstring: a statement waiting for a lock held elsewhere)."""
MAX_ITEMS = 128
"""Items one statement writes, at most."""

_QUEUED, _TAKEN, _DONE = 0, 1, 2


class Item:
    """One caller's write; a kind subclasses it with its parameters."""

    __slots__ = ("error", "keys", "lead", "outcome", "stage", "wake")

    def __init__(self, keys: tuple[Hashable, ...]) -> None:
        self.keys = keys  # items sharing one are written by separate statements
        self.stage = _QUEUED
        self.lead = False  # handed the lead while queued (counted in GroupCommit._running)
        self.wake: anyio.Event | None = None  # set when state or lead changes
        self.outcome: bool | None = None
        self.error: BaseException | None = None


W = TypeVar("W", bound=Item)
One = Callable[[Conn, W], Awaitable[bool]]
Many = Callable[[Conn, list[W]], Awaitable[list[bool]]]


class GroupCommit(Generic[W]):
    """Writes of one kind, many per statement (module docstring). ``one``: the statement of
    one item; ``many``: the multi-row one, each item's outcome in order. ``statements`` and
    ``written`` count what it ran (tests and benchmarks read them)."""

    def __init__(self, pool: Pool, one: One[W], many: Many[W], *, in_flight: int = IN_FLIGHT,
                 max_items: int = MAX_ITEMS, stalled: float = STALLED) -> None:
        self.pool = pool
        self.one = one
        self.many = many
        self.in_flight = in_flight
        self.max_items = max_items
        self.stalled = stalled
        self.statements = 0
        self.written = 0
        self._queue: deque[W] = deque()
        self._running = 0  # leaders under way, and leads handed to queued items
        self._moved = 0.0  # when a statement last started or ended (time.monotonic)

    async def submit(self, item: W) -> bool | None:
        """Write ``item``: its outcome once its statement committed (None: write it alone).
        Raises ServerUnavailable (OutcomeUnknown: it may have been stored); cancellation as
        the module docstring says."""
        # (A caller cancelled already: a leader's pool slot raises it, a follower's wait.)
        self._queue.append(item)
        lead = self._may_lead()
        if lead:
            self._running += 1
        try:
            while item.stage is not _DONE:
                if lead and item.stage is _QUEUED:
                    await self._statement()
                    continue
                if lead:  # another leader took it: lead no longer
                    lead = False
                    self._hand_on()
                await self._wait(item, bool(self._queue) and self._queue[0] is item)
                if item.lead:
                    item.lead, lead = False, True
                elif item.stage is _QUEUED and self._may_lead():  # (stalled)
                    self._running += 1
                    lead = True
        except BaseException as exc:
            if item.stage is _QUEUED:  # not taken: it will not be written
                head = self._queue[0] is item
                self._queue.remove(item)
                if head and self._queue:
                    self._poke(self._queue[0])  # it waits as the head now
                if item.lead:
                    item.lead, lead = False, True
                if lead:
                    lead = False
                    self._hand_on()
                raise
            if lead:
                lead = False
                self._hand_on()
            with anyio.CancelScope(shield=True):  # taken: answered once its statement ends
                while item.stage is not _DONE:
                    await self._wait(item, False)
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
        if lead:
            self._hand_on()
        if item.error is not None:
            raise item.error
        return item.outcome

    def _may_lead(self) -> bool:
        """Whether a caller may start a statement: fewer than ``in_flight`` are under way,
        or none has started or ended for ``stalled`` seconds (the one under way waits for a
        lock held elsewhere, perhaps for long: another replica's transaction on the same
        claim, frozen with its process; the others must not wait behind it)."""
        if self._running < self.in_flight:
            return True
        return time.monotonic() - self._moved >= self.stalled

    async def _wait(self, item: W, head: bool) -> None:
        """Until ``item`` is poked; the head of the queue also wakes after ``stalled``
        seconds, to lead if the statements under way stalled (no timer otherwise)."""
        item.wake = anyio.Event()
        try:
            if head:
                with anyio.move_on_after(self.stalled):
                    await item.wake.wait()
            else:
                await item.wake.wait()
        finally:
            item.wake = None

    def _hand_on(self) -> None:
        """A leader is done: the first queued item not yet handed the lead leads next."""
        for waiting in self._queue:
            if not waiting.lead:
                waiting.lead = True
                self._poke(waiting)
                return
        self._running -= 1

    @staticmethod
    def _poke(item: W) -> None:
        if item.wake is not None:
            item.wake.set()

    def _take(self) -> list[W]:
        """The queued items to write now, in order; those sharing a key with one taken stay
        for the next statement. A taken item handed the lead no longer needs it."""
        taken: list[W] = []
        keys: set[Hashable] = set()
        later: deque[W] = deque()
        for item in self._queue:
            if len(taken) >= self.max_items or not keys.isdisjoint(item.keys):
                later.append(item)
                continue
            keys.update(item.keys)
            item.stage = _TAKEN
            if item.lead:
                item.lead = False
                self._running -= 1
            taken.append(item)
        self._queue = later
        return taken

    async def _statement(self) -> None:
        """One statement of what is queued when it gets a connection. Raises only what came
        before anything was taken (cancelled waiting for a pool slot, the database cannot be
        reached): the leader's own item is still queued then."""
        batch: list[W] = []
        self._moved = time.monotonic()

        async def write(conn: Conn) -> list[bool]:
            batch.extend(self._take())  # once a connection is in hand: nothing waits after
            if not batch:
                return []
            self._moved = time.monotonic()
            self.statements += 1
            self.written += len(batch)
            if len(batch) == 1:
                return [await self.one(conn, batch[0])]
            return await self.many(conn, batch)

        try:
            got = await self.pool.run(write, transaction=False)
        except BaseException as exc:
            if not batch:
                raise
            for item in batch:
                if isinstance(exc, ServerUnavailable):
                    item.error = copy.copy(exc)  # each caller raises its own
                elif isinstance(exc, psycopg.Error):
                    pass  # rolled back, perhaps one item's fault: each written alone (None)
                elif isinstance(exc, Exception):
                    item.error = exc  # not the database's: said as it is
                else:
                    item.error = ServerUnavailable("the PostgreSQL store is closing")
            self._finish(batch)
            if not isinstance(exc, Exception):
                raise
            return
        for item, outcome in zip(batch, got, strict=True):
            item.outcome = outcome
        self._finish(batch)

    def _finish(self, batch: list[W]) -> None:
        self._moved = time.monotonic()
        for item in batch:
            item.stage = _DONE
            self._poke(item)
