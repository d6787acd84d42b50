"""Hand-over between processes of a shared store: the messages and the transport a store offers
(no I/O here).

A follow-up message (the answer to ``input-required``) must reach the run that asked, which
lives in one process; behind a load balancer it may reach any replica. The replica that gets it
hands it to the holder through the store (``runtime/handover.py`` has the protocol): a
:data:`HAND` envelope to every process, a :data:`REPLY` back to the sender from the one whose
runner holds the run, and a :data:`RELEASE` to the holder when the sender's caller hung up.

A store offers a :class:`HandoverTransport` (``TaskStore.handover_transport()``): Redis with
pub/sub channels (``store/redis/handover.py``), a PostgreSQL store with LISTEN/NOTIFY. Delivery
may be lost (a listener reconnecting): the protocol bounds every wait, so a lost message costs
the caller a "try again", never a double delivery (the holder delivers a follow-up only to a run
parked in ``ctx.ask``, so a second copy of the same answer is refused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import msgspec

from ..protocol.types import Message

HAND = "hand"
REPLY = "reply"
RELEASE = "release"
PROBE = "probe"  # is the run of ``task_id`` alive here? (a resend deciding whether to rerun)


class Envelope(msgspec.Struct, omit_defaults=True):
    """One hand-over message. ``kind``: :data:`HAND`, :data:`REPLY`, :data:`RELEASE` or
    :data:`PROBE`; ``id``: the hand-over's id (a reply and a release name the one they answer).
    A probe's reply carries, in ``text``, why the run is being cancelled ("" running)."""

    kind: str
    id: str
    sender: str = ""  # the process id of the hand-over's sender (replies go there)
    task_id: str = ""
    message: Message | None = None  # HAND: the follow-up
    detach_reason: str | None = None  # HAND: the follow-up asked not to wait
    marker: str | None = None  # HAND: why the server would run the follow-up detached
    position: int = 0  # HAND: the log position the sender follows from
    code: int = 0  # REPLY: 0 delivered, else the A2A error code the holder refused it with
    text: str = ""  # REPLY: the refusal's message (a probe's: the run's cancel reason)


encode = msgspec.json.Encoder().encode
decode = msgspec.json.Decoder(Envelope).decode


class HandoverTransport(Protocol):
    """How a shared store carries hand-over envelopes between its processes."""

    process_id: str
    """This process's id (the one its liveness lease and its direct channel use)."""

    def listen(self, receiver: Callable[[bytes], None]) -> None:
        """Call ``receiver`` (synchronously, on the event loop) with each envelope that reaches
        this process: those sent to every process, and those sent to it."""

    async def send(self, to: str | None, payload: bytes) -> None:
        """Send ``payload`` to the process ``to``, or to every process (None). Best effort:
        raises ServerUnavailable when the store is unreachable."""
