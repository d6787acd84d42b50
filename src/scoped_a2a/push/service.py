"""``PushService``: accepts push-notification configs and delivers a task's state changes to them.

Ownership. Each (task, config) pair has one *watch*: a task in the server nursery (never in the
request that set the config) that follows the task's event log from the position the config was
set at and delivers every state change it finds, one at a time, in log order. The log is the
queue: nothing is buffered in memory, a slow or failing webhook only makes its watch lag (the
store keeps the events), and a delivery never overtakes an earlier one for the same webhook. A
watch ends after delivering the terminal state, when its task is evicted, when its config is
deleted, or at shutdown. It needs no hook in the runner: anything that appends a state change to
the log (a run, CancelTask, shutdown, another replica sharing the store) is delivered.

Shutdown. ``shutdown`` first lets the watches finish for ``grace`` seconds (the runs have already
ended, so every watch has a bounded amount of work left), then cancels the rest. A cancelled
watch records its delivery in flight, and every state change it had not read yet, as
``undelivered`` with the reason, and logs each: none is dropped silently.

Several processes (a store with ``push_watches()``: Redis, PostgreSQL). Each watch is owned by
one process (store/push_watches.py): the one that accepted its config, until it stops. Then
another process adopts it (every serving or ``worker`` process checks every third of the lease,
:mod:`.fleet`) and resumes after the last state change delivered. On shutdown a watch waiting
for events is handed over at once, one delivering finishes that delivery first (within
``grace``), and none records its unread state changes undelivered: they are another replica's
to deliver. A watch that learns another process took it (its own lease had lapsed) stops.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import msgspec
from anyio.abc import TaskGroup

from ..protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from ..protocol.types import TaskPushNotificationConfig, TaskState, TaskStatusUpdateEvent
from ..runtime.tail import tail
from ..store.base import LogEntry, LogPage, TaskStore
from . import payload as payloads
from .delivery import Sender
from .fleet import adopt_loop, hand_on
from .guard import WebhookRefused, check_fields
from .records import DeliveryLog, DeliveryRecord
from .settings import PushSettings

log = logging.getLogger("scoped_a2a.push")

RECORD_TIMEOUT = 2.0
"""Seconds a cancelled watch may take (shielded) to record what it leaves undelivered."""


@dataclass(eq=False, slots=True)
class _Watch:
    task_id: str
    config_id: str
    v1: bool  # which dialect's payload the config asked for (the one it was set in)
    cursor: int  # the last log position handled
    state: TaskState  # the state as of ``cursor``
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    current: DeliveryRecord | None = None  # the delivery in flight
    config: TaskPushNotificationConfig | None = None  # as last read from the store
    stop_reason: str | None = None  # set by whoever cancels the watch
    record_rest: bool = True  # on cancellation, record unread state changes as undelivered
    busy: bool = False  # handling a page of the log (maybe a delivery in flight)


class _Leaving(Exception):
    """A watch stops between two deliveries: this process leaves it to another (shutdown)."""


class _NotOurs(Exception):
    """Another process took this watch over (this one's lease had lapsed): stop quietly."""


class PushService:
    """Push notifications of one app: config checks, watches, delivery records."""

    def __init__(self, store: TaskStore, settings: PushSettings) -> None:
        self.store = store
        self.settings = settings
        self.enabled = settings.enabled
        self.sender = Sender(settings)
        self.records = DeliveryLog(settings.max_records)
        self.closing = False
        self._nursery: TaskGroup | None = None
        self._watches: dict[tuple[str, str], _Watch] = {}
        self._idle = anyio.Event()
        self._idle.set()
        self._shutdown_reason: str | None = None
        self.owners = store.push_watches()
        """Who watches each config when several processes share the store (None: we do)."""
        self.leaving = False
        self._adopting: anyio.CancelScope | None = None  # (made in the loop: anyio needs one)

    # --- lifetime -------------------------------------------------------------------------

    def attach(self, nursery: TaskGroup) -> None:
        """Start watches in ``nursery`` (the server nursery) from now on."""
        self._nursery = nursery
        self.closing = False
        self._shutdown_reason = None

    def watching(self, task_id: str, config_id: str) -> bool:
        """Whether a watch of this config runs here (not being stopped)."""
        watch = self._watches.get((task_id, config_id))
        return watch is not None and not watch.scope.cancel_called

    @property
    def active(self) -> int:
        """How many watches are following a task now."""
        return len(self._watches)

    @asynccontextmanager
    async def serving(self, nursery: TaskGroup, *, grace: float) -> AsyncIterator[None]:
        """Deliver from ``nursery`` for the ``async with`` body, then drain (:meth:`shutdown`)."""
        self.attach(nursery)
        if self.owners is not None:
            self._adopting = anyio.CancelScope()
            nursery.start_soon(adopt_loop, self, self.owners, self._adopting,
                               name="scoped_a2a push adoption")
        try:
            yield
        finally:
            try:
                await self.shutdown(grace)
            finally:
                await self.sender.aclose()

    async def shutdown(self, grace: float) -> None:
        """Refuse new configs, give watches ``grace`` seconds, then cancel and record the rest.

        Returns once every watch has recorded how it ended (or RECORD_TIMEOUT more seconds).
        If this is itself cancelled, the nursery's cancellation ends the watches, which still
        record what they leave undelivered.
        """
        self.closing = True
        if self._adopting is not None:
            self._adopting.cancel()
        if self.owners is not None:
            # Another process delivers what is left: hand over every watch now, except those
            # delivering, which stop after the delivery in flight (_Leaving).
            self.leaving = True
            for watch in list(self._watches.values()):
                if not watch.busy:
                    watch.scope.cancel()
        with anyio.move_on_after(max(grace, 0.0) if math.isfinite(grace) else math.inf):
            await self._idle.wait()
        self._shutdown_reason = (
            f"the server shut down before it could be delivered (grace period {grace:g}s)")
        for watch in list(self._watches.values()):
            watch.scope.cancel()
        with anyio.move_on_after(RECORD_TIMEOUT + 1.0):
            await self._idle.wait()

    # --- configs --------------------------------------------------------------------------

    async def accept(self, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        """Check a config from a caller; raise InvalidParams (-32602) saying what is wrong.

        The URL goes through the SSRF guard (resolved now; checked again at delivery).
        """
        if self.closing:
            raise ServerUnavailable("the server is shutting down and accepts no new configs")
        check_fields(config)
        try:
            await self.sender.check(config.url)
        except WebhookRefused as exc:
            raise InvalidParams(f"invalid push notification config: {exc}") from None
        return config

    async def set_config(
        self,
        task_id: str,
        config: TaskPushNotificationConfig,
        *,
        v1: bool,
        after: int | None = None,
        state: TaskState | None = None,
    ) -> TaskPushNotificationConfig:
        """Store an accepted config with its task and watch the task from ``after`` on.

        Without ``after``, state changes after this call are delivered. The id defaults to the
        task id (as the official SDK does). Returns the stored config. Raises TaskNotFound, or
        InvalidParams when the task already has ``max_configs_per_task`` other configs.
        """
        if after is None or state is None:
            task, after = await self.store.get(task_id)
            state = task.status.state
        stored = msgspec.structs.replace(config, task_id=task_id, id=config.id or task_id)
        assert stored.id is not None
        existing = await self.store.push_configs(task_id)
        if (stored.id not in {c.id for c in existing}
                and len(existing) >= self.settings.max_configs_per_task):
            raise InvalidParams(f"task {task_id!r} already has {len(existing)} push "
                                "notification configs; delete one first")
        await self.store.set_push_config(task_id, stored)
        if not state.terminal:
            running = self._watches.get((task_id, stored.id))
            if self.owners is None:
                await self.store.push_progress(task_id, stored.id, after, state.value, v1)
            elif running is None or running.scope.cancel_called:
                # One process watches a config, whichever replica set (or replaced) it.
                at = await self.owners.own(task_id, stored.id, (after, state.value, v1))
                if at is None:
                    return stored  # a live replica watches it and reads the config as it is
                after, state = at[0], TaskState(at[1])
            # (else: the watch running here goes on from its own progress)
            self._watch(task_id, stored.id, v1=v1, after=after, state=state)
        return stored

    async def resume(self, pending: Iterable[tuple[str, str, int, str, bool]]) -> None:
        """Watch again what a previous process of a durable store left undelivered
        (``TaskStore.pending_pushes``: task, config, cursor, state, dialect); state changes
        after each cursor are delivered (again, if one was in flight when it stopped)."""
        for task_id, config_id, cursor, state, v1 in pending:
            self._watch(task_id, config_id, v1=v1, after=cursor, state=TaskState(state))
        await anyio.lowlevel.checkpoint()

    async def delete_config(self, task_id: str, config_id: str) -> bool:
        """Delete a config; its delivery in flight is recorded undelivered, the rest skipped."""
        deleted = await self.store.delete_push_config(task_id, config_id)
        watch = self._watches.get((task_id, config_id))
        if watch is not None:
            watch.stop_reason = "the push config was deleted before delivery"
            watch.record_rest = False
            watch.scope.cancel()
        return deleted

    async def _config(self, watch: _Watch) -> TaskPushNotificationConfig | None:
        """The config as stored now (None: deleted); if the task itself has been evicted from
        the store meanwhile, the config as last seen, so the delivery in flight carries on."""
        try:
            configs = await self.store.push_configs(watch.task_id)
        except TaskNotFound:
            return watch.config
        watch.config = next((c for c in configs if c.id == watch.config_id), None)
        return watch.config

    # --- watches --------------------------------------------------------------------------

    def _watch(self, task_id: str, config_id: str, *, v1: bool, after: int,
               state: TaskState) -> None:
        watch = self._watches.get((task_id, config_id))
        if watch is not None and not watch.scope.cancel_called:
            watch.v1 = v1  # a replaced config: the running watch delivers to it from here on
            return
        # (A watch being cancelled, e.g. its config was just deleted, is replaced by a new one.)
        if self._nursery is None:
            raise ServerUnavailable("the app is not running (serve it, or enter app.running())")
        watch = _Watch(task_id, config_id, v1, after, state)
        self._watches[(task_id, config_id)] = watch
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self._nursery.start_soon(self._run_watch, watch,
                                 name=f"scoped_a2a push {task_id}/{config_id}")

    async def _run_watch(self, watch: _Watch) -> None:
        ended = False
        finished = True  # ended with nothing left to deliver (nobody is to adopt it)
        try:
            with watch.scope:
                try:
                    await self._follow(watch)
                    ended = True
                except _Leaving:
                    pass  # handed over below, as a cancelled watch is
                except _NotOurs:
                    ended, finished = True, False
                    log.warning("push watch of task %s config %s stopped: another process took "
                                "it over (this one's lease had lapsed)", watch.task_id,
                                watch.config_id)
                except TaskNotFound:
                    ended = True
                    log.warning("push watch of task %s config %s ended: the task was evicted "
                                "from the store; state changes after position %d are not pushed",
                                watch.task_id, watch.config_id, watch.cursor)
                except Exception:
                    ended, finished = True, False
                    log.exception("push watch of task %s config %s failed", watch.task_id,
                                  watch.config_id)
                    if watch.current is not None and watch.current.status == "pending":
                        watch.current.finish("failed", "internal error; see the server log")
        finally:
            reason = (watch.stop_reason or self._shutdown_reason
                      or "the server nursery was cancelled before it could be delivered")
            with anyio.move_on_after(RECORD_TIMEOUT, shield=True) as recording:
                try:
                    if not ended and self.owners is not None and watch.record_rest:
                        await hand_on(self.owners, watch)  # another replica delivers the rest
                    elif not ended:
                        await self._record_undelivered(watch, reason)
                    if self.owners is not None and finished and (ended or not watch.record_rest):
                        await self.owners.done(watch.task_id, watch.config_id)
                except Exception:  # never replace the cancellation on its way out
                    log.exception("recording the undelivered pushes of task %s failed",
                                  watch.task_id)
            if recording.cancelled_caught:
                log.error("could not record the undelivered pushes of task %s within %gs",
                          watch.task_id, RECORD_TIMEOUT)
            key = (watch.task_id, watch.config_id)
            if self._watches.get(key) is watch:
                del self._watches[key]
            if not self._watches:
                self._idle.set()

    async def _follow(self, watch: _Watch) -> None:
        """Deliver each state change after ``watch.cursor`` until the task has ended."""

        async def on_page(page: LogPage) -> None:
            if page.first_retained > watch.cursor + 1:
                log.warning("push watch of task %s lagged past the log's retained window; "
                            "state changes before position %d were not delivered",
                            watch.task_id, page.first_retained)
            watch.busy = True
            try:
                for entry in page.entries:
                    if self.leaving:
                        raise _Leaving
                    await self._handle(watch, entry)
                    watch.cursor = entry.position
            finally:
                watch.busy = False

        while not watch.state.terminal:
            await tail(self.store, watch.task_id, watch.cursor, on_page)
            if not watch.state.terminal:
                # tail stops at an interrupted state (follow on), or when the task ended before
                # our cursor (nothing more will come).
                task, pos = await self.store.get(watch.task_id)
                if task.status.state.terminal and pos <= watch.cursor:
                    return

    def _change(self, watch: _Watch, entry: LogEntry) -> TaskStatusUpdateEvent | None:
        """The entry's event if it is a state change this config is to receive."""
        event = entry.event
        if not isinstance(event, TaskStatusUpdateEvent) or event.status.state == watch.state:
            return None
        watch.state = event.status.state
        if self.settings.deliver == "terminal" and not watch.state.terminal:
            return None
        return event

    async def _handle(self, watch: _Watch, entry: LogEntry) -> None:
        event = self._change(watch, entry)
        if event is None:
            return
        task, _ = await self.store.get(watch.task_id)
        body = payloads.body(task, event, entry.encoded, v1=watch.v1)
        config = await self._config(watch)
        record = self.records.add(DeliveryRecord(
            watch.task_id, watch.config_id,
            payloads.delivery_id(watch.task_id, watch.config_id, entry.position),
            entry.position, event.status.state, config.url if config else ""))
        watch.current = record
        await self.sender.deliver(record, body, lambda: self._config(watch))
        watch.current = None
        # A durable store remembers it: a restart resumes after this delivery, not before.
        if self.owners is None:
            await self.store.push_progress(watch.task_id, watch.config_id, entry.position,
                                           watch.state.value, watch.v1)
        elif not await self.owners.progress(watch.task_id, watch.config_id,
                                            (entry.position, watch.state.value, watch.v1)):
            raise _NotOurs

    async def _record_undelivered(self, watch: _Watch, reason: str) -> None:
        """Record the delivery in flight and every unread state change as undelivered."""
        current = watch.current
        if current is not None and current.status == "pending":
            current.finish("undelivered", reason)
            _log_undelivered(current)
        if not watch.record_rest:
            return
        cursor = max(watch.cursor, current.position if current is not None else 0)
        url = current.url if current is not None else ""
        left = 0
        while True:
            page = await self.store.read(watch.task_id, cursor)
            for entry in page.entries:
                event = self._change(watch, entry)
                if event is not None:
                    record = self.records.add(DeliveryRecord(
                        watch.task_id, watch.config_id,
                        payloads.delivery_id(watch.task_id, watch.config_id, entry.position),
                        entry.position, event.status.state, url, attempts=0))
                    record.finish("undelivered", reason)
                    _log_undelivered(record)
                    left += 1
            cursor = page.next
            if not page.has_more:
                break
        if current is None and not left:
            log.info("push watch of task %s config %s stopped in state %s with nothing pending "
                     "(%s); later state changes will not be pushed", watch.task_id,
                     watch.config_id, watch.state.name.lower(), reason)


def _log_undelivered(record: DeliveryRecord) -> None:
    log.warning("push undelivered task=%s config=%s state=%s attempts=%d: %s", record.task_id,
                record.config_id, record.state.name.lower(), record.attempts, record.reason)
