"""The key file that seals push configs (and the PostgreSQL store's NOTIFY payloads):
``store/sealing.py``.

Found (tests/postgres, ``serve --no-worker`` and ``worker`` started together): one process had
created the key file and was still writing it when the other read it empty and refused to
start ("is not a store key", exit 2). The file now appears whole or not at all; eight threads
creating it at once stand for processes starting together (the same system calls).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from scoped_a2a.store.sealing import KEY_BYTES, Sealer, load_key

ROUNDS = 10  # before the fix, a round had a refusal with probability ~0.57
STARTERS = 8


def test_starters_racing_to_create_the_key_file_all_get_the_one_key(tmp_path: Path) -> None:
    for r in range(ROUNDS):
        path = tmp_path / f"push-{r}.key"
        got: list[bytes] = []
        refused: list[str] = []
        barrier = threading.Barrier(STARTERS)

        def start(path: Path = path, got: list[bytes] = got, refused: list[str] = refused,
                  barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                got.append(load_key(path))
            except ValueError as exc:
                refused.append(str(exc))

        threads = [threading.Thread(target=start) for _ in range(STARTERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not refused, (r, refused[:2])
        assert len(got) == STARTERS and len(set(got)) == 1, r
        assert path.read_bytes() == got[0] and len(got[0]) == KEY_BYTES
        assert path.stat().st_mode & 0o777 == 0o600
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_key_reopens_what_it_sealed_and_another_key_file_is_refused(tmp_path: Path) -> None:
    key = load_key(tmp_path / "k")
    sealed = Sealer(key).seal(b"token")
    assert load_key(tmp_path / "k", sealed=sealed) == key
    other = tmp_path / "other"
    load_key(other)
    with pytest.raises(ValueError, match="does not open the push configs"):
        load_key(other, sealed=sealed)
