"""One log line per failure class while a store is unreachable, not one (with a traceback) per
failed call (no I/O).

When Redis (or any shared store) goes away, every request, heartbeat, listener and run that
touches it fails, each with the same cause: logging each one buried the first useful line under
hundreds of tracebacks. An :class:`OutageLog` logs the first failure of a class at once (one
line, no traceback), then at most one line every ``every`` seconds for that class, with how many
failures it stood for, and one line when the class succeeds again.

A class is a short label chosen by the caller ("listener", "liveness", "run end"...).
"""

from __future__ import annotations

import logging
import time

EVERY = 5.0
"""Seconds between two lines about the same failure class."""


class OutageLog:
    """Rate-limited failure lines for one logger. Not thread-safe (one event loop)."""

    def __init__(self, logger: logging.Logger, every: float = EVERY) -> None:
        self.logger = logger
        self.every = every
        self._state: dict[str, list[float]] = {}  # class -> [last line at, failures since, total]

    def failed(self, kind: str, msg: str, *args: object, level: int = logging.WARNING) -> bool:
        """A failure of class ``kind``: logged (at ``level``, no traceback) if it is the first,
        or ``every`` seconds passed since the last line, with how many it stands for; True if
        a line was written."""
        now = time.monotonic()
        state = self._state.get(kind)
        if state is None:
            self._state[kind] = [now, 0, 1]
            self.logger.log(level, msg, *args)
            return True
        state[1] += 1
        state[2] += 1
        if now - state[0] < self.every:
            return False
        self.logger.log(level, msg + " (and %d more like it in the last %.0f s)",
                        *args, state[1], now - state[0])
        state[0], state[1] = now, 0
        return True

    def recovered(self, kind: str) -> None:
        """Class ``kind`` succeeded: one line if it had failed (how many times in all)."""
        if self._state:
            state = self._state.pop(kind, None)
            if state is not None:
                self.logger.warning("%s: working again after %d failure(s)", kind,
                                    int(state[2]))

    def failing(self, kind: str) -> bool:
        """Whether class ``kind`` has failed since it last succeeded."""
        return kind in self._state
