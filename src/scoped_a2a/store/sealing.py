"""Sealing: values encrypted and authenticated with a key kept outside the database (stdlib only).

Shared by the stores that keep secrets where others can read them. A push config holds a
webhook's token and credentials: the SQLite and PostgreSQL stores never write them in clear
text; each config's JSON is sealed with a 32-byte key read from a key file (created with mode
0600 on first use: :func:`load_key`). A copy of the database alone (a backup, a file attached
to a bug report) then reveals no credential; whoever can read the key file as well can. A
config whose seal does not verify (a wrong key file) is refused with a clear error, never sent
anywhere. The PostgreSQL store seals its ``NOTIFY`` payloads between replicas too
(``store/postgres/sealed.py``), with keys derived from the same file.

Construction: keys for encryption and for the MAC are derived from the key file's key with
HMAC-SHA256; the keystream is HMAC-SHA256(enc key, nonce || counter) (a PRF in counter mode),
the tag HMAC-SHA256(mac key, nonce || ciphertext) truncated to 16 bytes. A fresh 16-byte random
nonce per seal.

Errors: :class:`SealBroken` for a value that does not open; :func:`load_key` raises ValueError
(one line saying what to do) or OSError. No I/O but the key file's; nothing to cancel.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

KEY_BYTES = 32
_NONCE = 16
_TAG = 16
_VERSION = b"\x01"


class SealBroken(Exception):
    """A sealed value does not verify with this key (another key file, or a changed byte)."""


def load_key(path: Path, *, sealed: bytes | None = None) -> bytes:
    """The key in ``path``, created (0600, random) if the file does not exist.

    ``sealed``: a value the store sealed earlier (None if it holds none). With one, a missing
    key file is not created afresh (every sealed config would then fail its seal) and a key
    that does not open it is refused. A key file other users can read is refused too (it would
    make the seal pointless). Each refusal is a ValueError whose message says what to do.
    Processes starting together (replicas, ``serve`` and ``worker``) all get the one key: the
    file appears whole or not at all (:func:`_create`).
    """
    if sealed is None:
        key = _create(path)
        if key is not None:
            return key
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ValueError(f"the key file {path} is missing, and the store holds push configs "
                         "sealed with it: restore it from where you keep it (or move the "
                         "store away to start afresh)") from None
    if not stat.S_ISREG(mode):  # a FIFO would block the read forever
        raise ValueError(f"the key file {path} is not a regular file; give the store's "
                         "key file, or move it away")
    if mode & 0o077:
        raise ValueError(f"the key file {path} can be read by other users (mode "
                         f"{mode & 0o777:o}): chmod 600 {path}")
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise ValueError(f"the key file {path} is not a store key ({KEY_BYTES} bytes); "
                         "restore it from where you keep it, or move it away to start "
                         "afresh (sealed push configs are then unreadable)") from None
    if sealed is not None:
        try:
            Sealer(key).open(sealed)
        except SealBroken:
            raise ValueError(f"the key file {path} does not open the push configs this "
                             "store sealed (another store's key?): restore the right key "
                             "file") from None
    return key


def _create(path: Path) -> bytes | None:
    """A new random key in ``path``, or None if the file exists (another process's).

    Written to a file of its own first, then hard-linked to ``path``, which fails if the file
    exists: a process reading ``path`` meanwhile never sees it empty or half-written (creating
    ``path`` itself and then writing it did: a second process starting at the same moment
    read it empty and refused to start)."""
    if os.path.lexists(path):  # the usual start: nothing to write (a full disk may refuse)
        return None
    key = secrets.token_bytes(KEY_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        _write_new(tmp, key)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:
        os.link(tmp, path)
    except FileExistsError:
        return None
    except OSError:  # a file system without hard links: in place (not atomic), as before
        return key if _write_new(path, key) else None
    finally:
        os.unlink(tmp)
    return key


def _write_new(path: Path, key: bytes) -> bool:
    """Create ``path`` (0600) holding ``key``; False if it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


class Sealer:
    """Seals and opens values with one key."""

    def __init__(self, key: bytes) -> None:
        self._enc = hmac.new(key, b"scoped-a2a push seal: encrypt", hashlib.sha256).digest()
        self._mac = hmac.new(key, b"scoped-a2a push seal: authenticate", hashlib.sha256).digest()

    def _stream(self, nonce: bytes, size: int) -> bytes:
        blocks = []
        for counter in range((size + 31) // 32):
            blocks.append(hmac.new(self._enc, nonce + counter.to_bytes(8, "big"),
                                   hashlib.sha256).digest())
        return b"".join(blocks)[:size]

    def seal(self, plain: bytes) -> bytes:
        nonce = secrets.token_bytes(_NONCE)
        stream = self._stream(nonce, len(plain))
        cipher = bytes(a ^ b for a, b in zip(plain, stream, strict=True))
        tag = hmac.new(self._mac, _VERSION + nonce + cipher, hashlib.sha256).digest()[:_TAG]
        return _VERSION + nonce + cipher + tag

    def open(self, sealed: bytes) -> bytes:
        if len(sealed) < 1 + _NONCE + _TAG or sealed[:1] != _VERSION:
            raise SealBroken("not a sealed value")
        nonce, cipher, tag = sealed[1:1 + _NONCE], sealed[1 + _NONCE:-_TAG], sealed[-_TAG:]
        want = hmac.new(self._mac, sealed[:-_TAG], hashlib.sha256).digest()[:_TAG]
        if not hmac.compare_digest(tag, want):
            raise SealBroken("the seal does not verify with this key")
        stream = self._stream(nonce, len(cipher))
        return bytes(a ^ b for a, b in zip(cipher, stream, strict=True))
