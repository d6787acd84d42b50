"""New ids for tasks, contexts, messages and artifacts: :func:`new_id`."""

from __future__ import annotations

import os


def new_id() -> str:
    """A random UUID (version 4) as 32 lowercase hex digits, what ``uuid.uuid4().hex`` gives.

    Why not ``uuid.uuid4().hex``: building the ``UUID`` object (an int from the bytes, then its
    checks) costs twice the random bytes themselves, and a blocking send makes three ids.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()
