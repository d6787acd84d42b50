"""Shared bits of the client tests: step options for quick failure handling, leak checks."""

from __future__ import annotations

from typing import Any

import anyio

from scoped_a2a.client import Backoff, live_followers
from scoped_a2a.client.follower import FOLLOWER_TASK_PREFIX

QUICK: dict[str, Any] = {
    "drain_timeout": 1.0,
    "poll_interval": 0.05,
    "read_timeout": 0.5,
    "backoff": Backoff(initial=0.05, cap=0.2),
    "reconnects": 2,
}
"""Step options that make a misbehaving agent show up within a second."""


def follower_tasks() -> list[str]:
    """Names of follower tasks still running (anyio task introspection)."""
    return [t.name for t in anyio.get_running_tasks()
            if t.name and t.name.startswith(FOLLOWER_TASK_PREFIX)]


def assert_no_followers_left() -> None:
    assert live_followers() == 0
    assert follower_tasks() == []
