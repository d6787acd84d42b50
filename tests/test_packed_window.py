"""store/packed.py compresses with a window sized to the input (why: see ``_deflate``)."""

from __future__ import annotations

import os
import zlib

import pytest

from scoped_a2a.store.packed import _deflate


def _window_bits(stream: bytes) -> int:
    return (stream[0] >> 4) + 8  # the zlib header's CINFO field is log2(window) - 8


@pytest.mark.parametrize("size", [0, 1, 300, 4096, 20_000, 70_000, 300_000])
@pytest.mark.parametrize("zdict_size", [0, 512, 32 << 10])
def test_round_trip_and_window(size: int, zdict_size: int) -> None:
    # JSON-like text with repeats near and far, plus some noise that does not compress.
    text = (b'{"state":"TASK_STATE_WORKING","text":"step %d"}' * (size // 40 + 1))[:size]
    data = bytes(a ^ (b & 1) for a, b in zip(text, os.urandom(len(text)), strict=True))
    zdict = (b'{"history":[' + b"x" * zdict_size)[:zdict_size]
    packed = _deflate(data, zdict)
    unpack = zlib.decompressobj(zdict=zdict) if zdict else zlib.decompressobj()
    assert unpack.decompress(packed) + unpack.flush() == data
    needed = max(9, (len(data) + len(zdict)).bit_length())
    assert _window_bits(packed) == min(15, needed)


def test_small_task_compresses_as_well_as_the_default_window() -> None:
    task = b'{"id":"%s","status":{"state":"TASK_STATE_COMPLETED"},"history":[]}' % (b"a" * 32)
    data = task * 12  # about 1 KB, as a small task's snapshot
    assert len(_deflate(data)) <= len(zlib.compress(data, 1)) + 2

