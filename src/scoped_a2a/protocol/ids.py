"""New ids for tasks, contexts, messages and artifacts: :func:`new_id`."""

from __future__ import annotations

import os
import threading


def new_id() -> str:
    """A random UUID (version 4) as 32 lowercase hex digits, what ``uuid.uuid4().hex`` gives.

    Why not ``uuid.uuid4().hex``: building the ``UUID`` object (an int from the bytes, then its
    checks) costs twice the random bytes themselves, and a blocking send makes three ids.
    """
    global _pool, _used
    with _lock:  # threads make ids too (a store's worker threads, a client in threads)
        if _used >= _POOL_BYTES:
            _pool, _used = bytearray(os.urandom(_POOL_BYTES)), 0
        raw = _pool[_used:_used + 16]
        _used += 16
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


# The random bytes, taken from the OS 4 KiB at a time (256 ids) rather than 16 bytes per id:
# one system call less per id, the same randomness (os.urandom's). Bytes are handed out once
# (a forked child starts a pool of its own).
_POOL_BYTES = 4096
_lock = threading.Lock()
_pool = bytearray()
_used = _POOL_BYTES


def _forget_pool() -> None:
    """In a forked child: never hand out bytes the parent may hand out too."""
    global _pool, _used
    _pool, _used = bytearray(), _POOL_BYTES


os.register_at_fork(after_in_child=_forget_pool)
