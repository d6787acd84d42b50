"""The command line's argument types: each parses one option value or says, in one line, what
to give instead (argparse prints it and exits 2). Shared by every command (serve, worker, send,
get, list, cancel, subscribe) so the same kind of value is checked, and refused, the same way.
"""

from __future__ import annotations

import argparse
import math
import re


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    value = _number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive, finite number of seconds")
    return value


def seconds_or_zero(text: str) -> float:
    """A finite number of seconds, 0 or more (a grace period, a wait that may be none)."""
    value = _number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 or more seconds")
    return value


def _whole(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r}: give {minimum} or more")
    return value


def at_least_one(text: str) -> int:
    """A whole number, 1 or more (a count, a limit)."""
    return _whole(text, 1)


def zero_or_more(text: str) -> int:
    """A whole number, 0 or more (a position, a history length)."""
    return _whole(text, 0)


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"{value} is not a port: give 1 to 65535, or 0 for a free one")
    return value


_SIZE_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


def parse_size(text: str) -> int:
    """A byte count from ``1048576``, ``64MiB``, ``1.5GiB``, ``500MB`` (K/M/G mean KiB/...)."""
    match = _SIZE.fullmatch(text.lower())
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size: give bytes (1048576) or a number with a unit "
            "(64MiB, 1GiB, 500MB)")
    size = int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be at least 1 byte")
    return size
