"""Sealed ``NOTIFY`` payloads: what replicas tell each other through PostgreSQL, opened only by
replicas holding the same key file.

Any role that may connect to the database may LISTEN to, and NOTIFY on, any channel (PostgreSQL
has no privilege for either). Two channels carry orders a replica obeys without checking a
caller's credentials again: hand-over envelopes (a follow-up delivered to a parked run,
:mod:`.handover`) and cancel requests (a run stopped at once, :mod:`.queue`, :mod:`.leases`).
So each payload on them is sealed (encrypted and authenticated: ``store/sealing.py``) with a key
of that channel's own, derived from the push-config key file every replica already shares: a
role without the file reads opaque bytes, and what it forges, or moves from one channel to the
other, does not open and is dropped (with a log line, at most one a minute).

Not prevented: replaying a sealed payload seen on the channel. A replayed cancel reaches at most
the run of the task it named, whose end was already recorded when it was first sent (a cancel
is announced after it is stored, a lost process's tasks as they are recorded lost); a replayed
follow-up, at most a run of the same task parked in ``ctx.ask`` again.

No I/O; nothing to cancel. Errors: none raised (a payload that does not open is None).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time

from ..sealing import SealBroken, Sealer

log = logging.getLogger("scoped_a2a.postgres")
LOG_EVERY = 60.0
"""Seconds between two log lines about dropped payloads of one channel (a flood of forgeries
must not flood the log): the first is logged at once, the next say how many were dropped."""


def channel_sealer(key: bytes, purpose: str) -> Sealer:
    """The sealer of one channel's payloads: a key of its own, derived from the key file's."""
    return Sealer(hmac.new(key, f"scoped-a2a postgres {purpose}".encode(), hashlib.sha256)
                  .digest())


class SealedChannel:
    """Seals what this process sends on one channel and opens what it receives there."""

    def __init__(self, sealer: Sealer, what: str) -> None:
        self.sealer = sealer
        self.what = what  # what a payload is, for the log ("cancel request")
        # Per class (False: did not open; True: opened, dropped all the same): how many were
        # dropped since the last line, and when that line was logged.
        self._dropped = {False: 0, True: 0}
        self._logged_at = {False: -LOG_EVERY, True: -LOG_EVERY}

    def seal(self, payload: bytes) -> bytes:
        return self.sealer.seal(payload)

    def wrap(self, payload: bytes) -> str:
        """``payload`` sealed, as NOTIFY text (base64)."""
        return base64.b64encode(self.sealer.seal(payload)).decode()

    def open(self, sealed: bytes) -> bytes | None:
        """The payload, or None (logged) when it does not open with this channel's key."""
        try:
            return self.sealer.open(sealed)
        except SealBroken:
            self._drop("does not open with this key (sent by a replica with another key "
                       "file, or forged)")
            return None

    def unwrap(self, text: str) -> bytes | None:
        """The payload of NOTIFY text made by :meth:`wrap`, or None (logged)."""
        try:
            sealed = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            self._drop("is not base64 (not sent by a replica: forged)")
            return None
        return self.open(sealed)

    def dropped(self, what: str) -> None:
        """A payload that opened was dropped all the same (``what``: why), logged as those
        that do not open are (at most one line a minute)."""
        self._drop(what, opened=True)

    def _drop(self, why: str, *, opened: bool = False) -> None:
        self._dropped[opened] += 1
        now = time.monotonic()
        if now - self._logged_at[opened] < LOG_EVERY:
            return
        count = self._dropped[opened]
        more = f" ({count} dropped since the last such line)" if count > 1 else ""
        if opened:
            log.warning("dropped a %s: %s%s", self.what, why, more)
        else:
            log.warning("dropped a %s that %s%s", self.what, why, more)
        self._logged_at[opened] = now
        self._dropped[opened] = 0
