"""store/outage_log.py: one line per failure class and period, with a count; one on recovery."""

from __future__ import annotations

import logging

import pytest

from scoped_a2a.store import outage_log
from scoped_a2a.store.outage_log import OutageLog


def test_one_line_per_class_and_period_with_the_count(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    monkeypatch.setattr(outage_log.time, "monotonic", lambda: now[0])
    log = OutageLog(logging.getLogger("test.outage"), every=5.0)
    with caplog.at_level(logging.INFO, logger="test.outage"):
        assert log.failed("store", "store down: %s", "refused")  # the first: at once
        for _ in range(300):  # a burst of the same failure: no line
            now[0] += 0.01
            assert not log.failed("store", "store down: %s", "refused")
        assert log.failed("other", "listener stopped")  # another class has its own line
        now[0] += 2.1  # 5.1 s after the first line
        assert log.failed("store", "store down: %s", "refused", level=logging.ERROR)
        log.recovered("store")
        log.recovered("store")  # only once
        assert log.failed("store", "store down: %s", "again")  # a new outage: at once
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (logging.WARNING, "store down: refused"),
        (logging.WARNING, "listener stopped"),
        (logging.ERROR, "store down: refused (and 301 more like it in the last 5 s)"),
        (logging.WARNING, "store: working again after 302 failure(s)"),
        (logging.WARNING, "store down: again"),
    ], lines
    assert log.failing("store") and log.failing("other")
