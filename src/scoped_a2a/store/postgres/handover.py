"""Hand-over on PostgreSQL (:class:`~scoped_a2a.store.handover.HandoverTransport`): NOTIFY.

Every envelope goes out on one channel, ``<schema>_handover``, which every process's listener
(:mod:`.listener`) LISTENs to; the payload is ``"<to> <sealed envelope>"``, ``<to>`` being the
recipient's process id or ``*`` for every process, and each listener keeps what is addressed
to it. (One channel rather than one per process: a channel name is an identifier of at most 63
bytes, and a schema name plus a process id may not fit.)

A NOTIFY payload must be shorter than 8000 bytes. An envelope that does not fit (a follow-up
with a large part) is stored in the table ``handover`` and the payload names it
(``"<to> @<sealed id>"``), in the same transaction, so the row is visible when the
notification arrives; the receiver reads it (one query, in this store's task group, never on
the listener's loop), at most :data:`MAX_FETCHING` at a time. Rows are deleted a minute after
they were written, by the next large send. The id is sealed too: a reference that anyone able
to connect could NOTIFY (``* @x``, a hundred thousand of them in one statement) made every
process spawn a task per notification, each queued for the pool's connections ahead of the
store's own operations; a forged one is now dropped at its seal check, without a query, and a
sealed one replayed from the channel waits for no pool slot beyond the bound (dropped, logged).

Sealed (:mod:`.sealed`, as cancel requests are). Any role that may connect to the database
may LISTEN and NOTIFY on any channel, and a follow-up carries the caller's words and is
delivered to a run without its caller's credentials being checked again: every envelope is
sealed with a key derived from the push-config key file every replica already shares, so
another role sees opaque bytes and what it forges is dropped (logged).

Delivery is at most once (a listener reconnecting misses what was sent meanwhile), as with
Redis pub/sub: the protocol bounds every wait (``runtime/handover.py``).

Cancellation: :meth:`PostgresHandover.send` is one transaction, committed whole or not at all.
Errors: ServerUnavailable when the database cannot be used.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

import anyio.abc

from ...protocol.errors import ServerUnavailable
from ...protocol.ids import new_id
from ..sealing import Sealer
from .connection import Conn, Pool
from .schema import NOW
from .sealed import SealedChannel, channel_sealer

log = logging.getLogger("scoped_a2a.postgres")

MAX_INLINE = 7000
"""Bytes of a payload sent in the notification itself (PostgreSQL's limit is 8000, counted in
the database's encoding; the margin covers the recipient's id)."""
KEEP = 60.0
"""Seconds a large envelope's row is kept (every wait of the protocol is shorter)."""
MAX_FETCHING = 4
"""Large envelopes read at once per process; more arriving meanwhile are dropped (a genuine
one is rare: a follow-up over 7000 bytes; a flood is a replay)."""


def handover_sealer(key: bytes) -> Sealer:
    """The sealer of hand-over envelopes: its own key, derived from the push-config key."""
    return channel_sealer(key, "hand-over")


class PostgresHandover:
    """The hand-over transport of one process."""

    def __init__(self, pool: Pool, process_id: str, sealer: Sealer) -> None:
        self.pool = pool
        self.process_id = process_id
        self.sealed = SealedChannel(sealer, "hand-over envelope")
        self.channel = f"{pool.schema}_handover"
        self.receivers: list[Callable[[bytes], None]] = []
        self.tg: anyio.abc.TaskGroup | None = None
        """Where large envelopes are read (set by ``open_postgres_store``)."""
        self.fetching = 0  # large envelopes being read now (at most MAX_FETCHING)

    def listen(self, receiver: Callable[[bytes], None]) -> None:
        self.receivers.append(receiver)

    async def send(self, to: str | None, payload: bytes) -> None:
        target = "*" if to is None else to
        channel = self.channel
        payload = self.sealed.seal(payload)
        if len(payload) * 4 // 3 + 4 <= MAX_INLINE:  # its base64 fits
            text = f"{target} {base64.b64encode(payload).decode()}"
            await self.pool.run(lambda c: c.execute("SELECT pg_notify(%s, %s)", (channel, text)))
            return
        ref = new_id()
        sealed_ref = self.sealed.wrap(ref.encode())

        async def run(conn: Conn) -> None:
            await conn.execute(f"DELETE FROM handover WHERE expires < {NOW}")
            await conn.execute(f"INSERT INTO handover VALUES (%s, %s, {NOW} + %s)",
                         (ref, payload, KEEP))
            await conn.execute("SELECT pg_notify(%s, %s)", (channel, f"{target} @{sealed_ref}"))

        await self.pool.run(run)

    def notified(self, payload: str) -> None:
        """A notification on the hand-over channel (the listener calls it on the loop)."""
        target, _, body = payload.partition(" ")
        if target not in ("*", self.process_id) or not body:
            return
        if not body.startswith("@"):
            self._deliver(self.sealed.unwrap(body))
            return
        if self.tg is None:
            return
        ref = self.sealed.unwrap(body[1:])  # forged: dropped here (logged), no query
        if ref is None:
            return
        if self.fetching >= MAX_FETCHING:
            self.sealed.dropped(f"{MAX_FETCHING} large ones were being read already (a "
                                "flood of replays?)")
            return
        self.fetching += 1
        self.tg.start_soon(self._fetch, ref.decode(errors="replace"))

    async def _fetch(self, ref: str) -> None:
        try:
            row = await self.pool.run(lambda c: c.one(
                "SELECT body FROM handover WHERE id = %s", (ref,)), retry=True)
        except ServerUnavailable as exc:  # lost, as a notification can be: the sender's wait ends
            log.info("could not read a hand-over envelope (%s)", exc)
            return
        finally:
            self.fetching -= 1
        if row is not None:
            self._deliver(self.sealed.open(bytes(row[0])))

    def _deliver(self, payload: bytes | None) -> None:
        if payload is None:  # forged, or another key file (logged)
            return
        for receiver in self.receivers:
            receiver(payload)
