"""Message claims: which task each (owner, messageId) created or continued (no I/O).

A send's ``messageId`` is claimed by its caller before the send takes effect, so a resent message
(a client retrying after a dropped connection) finds the task the first one created instead of
starting a second run (docs/exactly-once.md). This module holds what every store shares: the
:class:`PriorSend` a claim answers with, the claim's key (a digest of the owner key and the
messageId, so an id of any length costs the same), and :class:`MemoryClaims`, the in-process
table the in-memory store keeps.

Lifetime of a claim in memory: it lives while its task is kept; when its task is evicted it lingers
for at least ``window`` seconds (a late retry still finds it and is told the task is gone, rather
than running the message again), unless the byte budget runs out first: lingering claims count
against it, and are dropped oldest first before any task is evicted for room
(``MemoryTaskStore._evict``).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

CLAIM_BYTES = 384
"""Bytes one claim is counted as: its record, key and fingerprint, its dict and list slots, and
the task id it keeps alive once its task is gone (measured with tracemalloc: ~380)."""

DEFAULT_CLAIM_WINDOW = 600.0
"""Seconds a claim outlives its evicted task by default: longer than any client's retry loop."""


@dataclass(frozen=True, slots=True)
class PriorSend:
    """What an earlier send of the same messageId by the same owner claimed.

    ``task_id``: the task it created (or continued). ``fingerprint``: its message's digest.
    ``position``: the task's log position when that message was accepted (0 for a new task), so
    a resent follow-up answers with what the first one's caller was answered. ``created``:
    False while the first send is still being set up (its task is not stored yet, or its
    follow-up not yet handed to the run).
    """

    task_id: str
    fingerprint: bytes
    position: int
    created: bool


@dataclass(frozen=True, slots=True)
class NewClaim:
    """The claim a new task's create makes in the same write, on a store that can
    (:meth:`~.base.TaskStore.create_claimed`): the send's ``messageId`` and its message's
    fingerprint (the owner is the task's)."""

    message_id: str
    fingerprint: bytes


class AlreadyClaimed(Exception):
    """A create with a claim found the ``messageId`` claimed by an earlier send: nothing was
    stored (the caller takes the claim path, which reads that claim)."""


def claim_key(owner: str, message_id: str) -> bytes:
    """The claim's key: a 16-byte digest of the owner key and the messageId."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(len(owner)).encode())
    h.update(b":")
    h.update(owner.encode("utf-8", "surrogatepass"))
    h.update(message_id.encode("utf-8", "surrogatepass"))
    return h.digest()


class _Claim:
    __slots__ = ("fingerprint", "gone", "position", "task_id")

    def __init__(self, fingerprint: bytes, task_id: str, position: int) -> None:
        self.fingerprint = fingerprint
        self.task_id = task_id
        self.position = position
        self.gone = False  # its task was evicted: the claim lingers until its window passes


class MemoryClaims:
    """The claims of one in-memory store. Synchronous: every operation is atomic on its loop.

    ``exists(task_id)`` tells whether a task is stored (the store's own lookup).
    """

    def __init__(self, window: float, exists: Callable[[str], bool]) -> None:
        if window < 0:
            raise ValueError("the claim window must not be negative")
        self.window = window
        self._exists = exists
        self._claims: dict[bytes, _Claim] = {}
        self._by_task: dict[str, list[bytes]] = {}
        self._lingering: OrderedDict[bytes, float] = OrderedDict()  # key -> expiry, oldest first

    def __len__(self) -> int:
        return len(self._claims)

    @property
    def size(self) -> int:
        """What the claims count against the store's byte budget: the lingering ones.

        A kept task's claims ride with it (one per message it took, next to the task's own
        JSON, which holds each message): counting them would let running tasks, which no
        budget bounds, push ended tasks out.
        """
        return CLAIM_BYTES * len(self._lingering)

    @property
    def lingering(self) -> int:
        """How many claims outlive their evicted task now."""
        return len(self._lingering)

    def claim(
        self, key: bytes, fingerprint: bytes, task_id: str, position: int
    ) -> PriorSend | None:
        """Claim ``key`` for ``task_id``; None if it was free, else what claimed it first."""
        self.expire()
        prior = self._claims.get(key)
        if prior is not None:
            return self._prior(prior)
        self._claims[key] = _Claim(fingerprint, task_id, position)
        self._by_task.setdefault(task_id, []).append(key)
        return None

    def _prior(self, claim: _Claim) -> PriorSend:
        created = claim.gone or self._exists(claim.task_id)
        return PriorSend(claim.task_id, claim.fingerprint, claim.position, created)

    def replace(self, key: bytes, old_task_id: str, new_task_id: str) -> PriorSend | None:
        """Point ``key`` from ``old_task_id`` to ``new_task_id`` (a new run of the message).

        None when done; else the claim as it is now (another resend replaced it first, or it
        is gone: then the caller claims afresh).
        """
        prior = self._claims.get(key)
        if prior is None:
            return PriorSend("", b"", 0, False)
        if prior.task_id != old_task_id:
            return self._prior(prior)
        self._unlink(key, prior)
        self._claims[key] = _Claim(prior.fingerprint, new_task_id, 0)
        self._by_task.setdefault(new_task_id, []).append(key)
        return None

    def release(self, key: bytes, task_id: str) -> None:
        """Drop ``key``'s claim if it is ``task_id``'s (the send it claimed for did not happen)."""
        prior = self._claims.get(key)
        if prior is not None and prior.task_id == task_id:
            del self._claims[key]
            self._unlink(key, prior)

    def _unlink(self, key: bytes, claim: _Claim) -> None:
        self._lingering.pop(key, None)
        keys = self._by_task.get(claim.task_id)
        if keys is not None:
            with contextlib.suppress(ValueError):
                keys.remove(key)
            if not keys:
                del self._by_task[claim.task_id]

    def task_gone(self, task_id: str) -> None:
        """The task was evicted: its claims linger for ``window`` seconds from now."""
        keys = self._by_task.pop(task_id, None)
        if not keys:
            return
        until = time.monotonic() + self.window
        for key in keys:
            claim = self._claims.get(key)
            if claim is not None:
                claim.gone = True
                self._lingering[key] = until

    def expire(self) -> None:
        """Drop lingering claims whose window has passed."""
        if not self._lingering:
            return
        now = time.monotonic()
        while self._lingering:
            key, until = next(iter(self._lingering.items()))
            if until > now:
                break
            self._drop_lingering(key)

    def trim(self, allowance: int) -> None:
        """Drop lingering claims, oldest first, until they count at most ``allowance`` bytes."""
        while self._lingering and self.size > allowance:
            self._drop_lingering(next(iter(self._lingering)))

    def _drop_lingering(self, key: bytes) -> None:
        del self._lingering[key]
        self._claims.pop(key, None)
