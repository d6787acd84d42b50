"""Which task channels Redis has confirmed on the listener's connection (bookkeeping, no I/O).

A reader that waits on a task needs its channel subscribed *and confirmed* before it checks the
task's position (:mod:`.local`): only then can no append slip between the check and the
subscription. The confirmation is Redis' acknowledgement of the ``SUBSCRIBE``, which the
listener reads like any message. It is recorded here when it arrives, however late, instead of
by the reader that asked for it: coredis gives a subscriber one second, and under a starved CPU
the acknowledgement came later, the reader gave up, nothing was recorded, and every later wait
asked Redis for the position (and subscribed again).

Order is what makes an acknowledgement trustworthy. Redis answers the ``SUBSCRIBE`` and
``UNSUBSCRIBE`` of one connection in the order they were sent. When an idle channel is
unsubscribed (:meth:`Subscriptions.leaving`) while a ``SUBSCRIBE`` of it is still unanswered,
that ``SUBSCRIBE``'s acknowledgement arrives first, yet the channel is left right after: so an
acknowledgement counts only when no ``UNSUBSCRIBE`` of the channel sent on the same connection
is still unanswered (any such one was sent after it). A new reader's ``SUBSCRIBE``, sent after
the ``UNSUBSCRIBE``, is answered after it, and confirms.

Connections. Everything is recorded with the listener connection it was sent on or read from;
coredis replaces that connection on a reconnect (it resubscribes only its own channels), and
what was recorded on an earlier one no longer counts. One edge stays: an acknowledgement the old
connection delivered, read only after the reconnect while a new ``SUBSCRIBE`` of the same
channel is in flight, confirms the new one early; a wake-up lost that way is caught by the
waiters' poll, as any message lost across a reconnect is.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio


class Subscriptions:
    """The state of each task channel's subscription; ``tick`` dates confirmations."""

    def __init__(self, tick: Callable[[], int]) -> None:
        self._tick = tick
        self._confirmed: dict[str, tuple[int, object]] = {}  # task -> (tick, connection)
        self._in_flight: dict[str, object] = {}  # task -> connection of an unanswered SUBSCRIBE
        self._leaving: dict[str, tuple[object, int]] = {}  # task -> (connection, unanswered)
        self._awaited: dict[str, anyio.Event] = {}  # task -> set when it is confirmed

    def confirmed_at(self, task_id: str, connection: object) -> int | None:
        """The tick ``task_id`` was confirmed at on ``connection``, or None."""
        confirmed = self._confirmed.get(task_id)
        if confirmed is None or confirmed[1] is not connection:
            return None
        return confirmed[0]

    def to_send(self, task_id: str, connection: object) -> bool:
        """Whether a ``SUBSCRIBE`` of ``task_id`` must be sent on ``connection`` (none is in
        flight there); if so it is recorded as sent."""
        if self._in_flight.get(task_id) is connection:
            return False
        self._in_flight[task_id] = connection
        return True

    def unsent(self, task_id: str) -> None:
        """The ``SUBSCRIBE`` recorded by :meth:`to_send` could not be sent."""
        self._in_flight.pop(task_id, None)

    def confirmation(self, task_id: str) -> anyio.Event:
        """An event set when ``task_id``'s subscription is next confirmed."""
        event = self._awaited.get(task_id)
        if event is None:
            event = self._awaited[task_id] = anyio.Event()
        return event

    def subscribed(self, task_id: str, connection: object) -> bool:
        """Redis acknowledged a ``SUBSCRIBE`` of ``task_id`` on ``connection``; True if that
        confirms it (no ``UNSUBSCRIBE`` sent after it is unanswered)."""
        if self._in_flight.get(task_id) is connection:
            del self._in_flight[task_id]
        if self._unanswered(task_id, connection):
            return False
        self._confirmed[task_id] = (self._tick(), connection)
        event = self._awaited.pop(task_id, None)
        if event is not None:
            event.set()
        return True

    def leaving(self, task_id: str, connection: object) -> None:
        """An ``UNSUBSCRIBE`` of ``task_id`` is about to be sent on ``connection``: its
        confirmation ends now (never trusted while unheard), and a new reader subscribes again."""
        self._confirmed.pop(task_id, None)
        self._in_flight.pop(task_id, None)
        self._leaving[task_id] = (connection, self._unanswered(task_id, connection) + 1)

    def unsubscribed(self, task_id: str, connection: object) -> None:
        """Redis acknowledged an ``UNSUBSCRIBE`` of ``task_id`` on ``connection``."""
        left = self._unanswered(task_id, connection) - 1
        if left > 0:
            self._leaving[task_id] = (connection, left)
        else:
            self._leaving.pop(task_id, None)

    def clear(self) -> None:
        """The listener's connection is gone: nothing recorded on it counts."""
        self._confirmed.clear()
        self._in_flight.clear()
        self._leaving.clear()
        # Readers waiting for a confirmation stop waiting (they poll, or subscribe again).
        for event in self._awaited.values():
            event.set()
        self._awaited.clear()

    def _unanswered(self, task_id: str, connection: object) -> int:
        leaving = self._leaving.get(task_id)
        return leaving[1] if leaving is not None and leaving[0] is connection else 0
