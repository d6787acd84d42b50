"""Message claims on Redis: a resent messageId finds its task from any replica (no state but a
map of this process's pending claims).

A claim is a hash ``<prefix>:claim:<digest>`` (fingerprint, task id, position, made, op) written
by :data:`.scripts.CLAIM_MESSAGE` in one step, so two replicas claiming the same message at once
get one winner. A claim is pending (it lapses after :data:`CLAIM_PENDING`) until it is made: a
new task's by the task's CREATE (the store passes the key from :meth:`RedisClaims.take_pending`),
a follow-up's by :meth:`RedisClaims.confirm` as the message is delivered;
from then on it lives while its task runs and gets the task's expiry, or the claim window if
longer, when the task ends (APPEND). docs/exactly-once.md has the rules.

Cancellation: every call is one script run, retried once after a connection error; the ``op``
id makes a retried claim recognise itself.
"""

from __future__ import annotations

from typing import Any

from ...protocol.ids import new_id
from ..claims import PriorSend, claim_key
from . import scripts
from .connection import RedisConnection

CLAIM_PENDING = 30.0
"""Seconds a message claim waits for its task to be stored before it lapses (its sender died
between the claim and the task's CREATE, or took longer than this: then CREATE refuses)."""


def _prior(raw: Any) -> PriorSend:
    fp, task_id, pos, made = raw
    return PriorSend(bytes(task_id or b"").decode(), bytes(fp or b""), int(pos or 0),
                     bytes(made or b"") == b"1")


class RedisClaims:
    """The message claims of one Redis store; ``keep_ms``: how long an ended task's claims
    are kept (the task's TTL, or the claim window if longer)."""

    def __init__(self, conn: RedisConnection, keep_ms: int) -> None:
        self.conn = conn
        self.keys = conn.keys
        self.keep_ms = keep_ms
        self._claim = conn.script(scripts.CLAIM_MESSAGE)
        self._reclaim = conn.script(scripts.RECLAIM_MESSAGE)
        self._confirm = conn.script(scripts.CONFIRM_MESSAGE)
        self._release = conn.script(scripts.RELEASE_MESSAGE)
        self._pending: dict[str, str] = {}  # new task id -> its pending claim's key (here)

    def take_pending(self, task_id: str) -> str:
        """The key of the pending claim a new ``task_id`` confirms when created ("" none)."""
        return self._pending.pop(task_id, "")

    async def claim(
        self, owner: str, message_id: str, fingerprint: bytes, task_id: str, position: int,
        created: bool,
    ) -> PriorSend | None:
        key = self.keys.claim(claim_key(owner, message_id))
        args: list[Any] = [fingerprint, task_id, position, 1 if created else 0, new_id(),
                           int(CLAIM_PENDING * 1000), self.keep_ms]
        raw = await self.conn.run(
            self._claim, [key, self.keys.task(task_id), self.keys.claims(task_id)], args)
        if raw is None:
            if not created:
                self._pending[task_id] = key
            return None
        return _prior(raw)

    async def reclaim(
        self, owner: str, message_id: str, old_task_id: str, new_task_id: str
    ) -> PriorSend | None:
        key = self.keys.claim(claim_key(owner, message_id))
        raw = await self.conn.run(
            self._reclaim, [key], [old_task_id, new_task_id, new_id(), int(CLAIM_PENDING * 1000)])
        if raw is None:
            self._pending[new_task_id] = key
            return None
        return _prior(raw)

    async def confirm(self, owner: str, message_id: str, task_id: str) -> None:
        self._pending.pop(task_id, None)  # (a follow-up's task exists: no CREATE takes it)
        key = self.keys.claim(claim_key(owner, message_id))
        keys = [key, self.keys.task(task_id), self.keys.claims(task_id)]
        await self.conn.run(self._confirm, keys, [task_id, self.keep_ms])

    async def release(self, owner: str, message_id: str, task_id: str) -> None:
        """Drop the claim of a send that failed, unless its task was stored with a queued
        run (a lost CREATE reply: that run executes, so the resend must find its task;
        :data:`.scripts.RELEASE_MESSAGE`)."""
        self._pending.pop(task_id, None)
        key = self.keys.claim(claim_key(owner, message_id))
        keys = [key, self.keys.claims(task_id), self.keys.task(task_id)]
        await self.conn.run(self._release, keys, [task_id])
