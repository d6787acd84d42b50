"""Capped exponential backoff with jitter, for retrying failed reads while a turn is open.

The n-th consecutive failure waits ``min(cap, initial * factor**(n-1))``, shortened by a random
fraction of up to ``jitter`` of itself, so many followers of one agent spread their retries
instead of hammering it in step. ``random`` is injectable so tests get exact delays.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    initial: float = 0.1
    factor: float = 2.0
    cap: float = 5.0
    jitter: float = 0.5
    random: Callable[[], float] = field(default=_random.random, compare=False)

    def __post_init__(self) -> None:
        if self.initial < 0 or self.cap < 0 or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("backoff needs initial >= 0, cap >= 0, factor >= 1, 0 <= jitter <= 1")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1 for the first)."""
        exponent = min(max(failures - 1, 0), 64)  # past 2**64 the cap has long been reached
        base = min(self.cap, self.initial * self.factor**exponent)
        return base * (1.0 - self.jitter * self.random())
