"""Hand-over on Redis (:class:`~scoped_a2a.store.handover.HandoverTransport`): pub/sub.

Requests go to ``<prefix>:handover``, which every process's listener subscribes to; replies and
releases go to ``<prefix>:handover:<process id>``, the sender's (or holder's) own channel. The
listener (:mod:`.connection`) subscribes to both when it starts and after every reconnect.
Pub/sub is at most once: the protocol above bounds its waits (``runtime/handover.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from .connection import RedisConnection


class RedisHandover:
    """The hand-over transport of one process."""

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self.process_id = conn.process_id

    def listen(self, receiver: Callable[[bytes], None]) -> None:
        self.conn.handover_handlers.append(receiver)

    async def send(self, to: str | None, payload: bytes) -> None:
        keys = self.conn.keys
        channel = keys.handover if to is None else keys.handover_to(to)
        await self.conn.call(lambda: self.conn.client.publish(channel, payload))
