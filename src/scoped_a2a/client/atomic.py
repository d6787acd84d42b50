"""Write-once files, atomically: a reader polling a directory never sees half a file.

The bytes go to a hidden temporary file beside the target (names starting with ``.`` are never
final files), which is then hard-linked into place: the link either creates the whole file or
fails because the file exists. Writing a file again with the same bytes is a no-op; with other
bytes it is an error (:class:`FileExistsError`), because a file, once written, is final.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from ..protocol.ids import new_id


def write_once_sync(path: Path, data: bytes, *, durable: bool = False) -> bool:
    """Create ``path`` holding ``data``; True if written, False if it already held ``data``."""
    try:
        if path.read_bytes() == data:
            return False
        raise FileExistsError(f"{path} already exists with other content (files are final)")
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{new_id()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            if path.read_bytes() != data:
                raise
            return False
        except OSError:  # a file system without hard links: replace (still atomic)
            if path.exists():
                raise FileExistsError(f"{path} already exists") from None
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return True


async def write_once(path: Path, data: bytes, *, durable: bool = False) -> bool:
    """:func:`write_once_sync` in a worker thread.

    Cancellation waits for the write to finish (it is short) and then propagates, so the file is
    either whole or absent, never torn.
    """
    return await anyio.to_thread.run_sync(lambda: write_once_sync(path, data, durable=durable))
