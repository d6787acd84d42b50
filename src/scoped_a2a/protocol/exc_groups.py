"""Finding one exception in a tree of exception groups (no I/O, imports nothing).

A task group raises what its tasks raised as a :class:`BaseExceptionGroup`, possibly nested,
with the cancellations the first failure caused beside it. The layers that must tell *what*
stopped them (the Redis listener: a cancellation or a connection error; the command line: a
port that cannot be bound, a Ctrl-C) look for the first leaf that matches, depth first, in the
order the group holds them. ``BaseExceptionGroup.subgroup`` answers a different question (a
group of the matches, not one of them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard, TypeVar

E = TypeVar("E", bound=BaseException)


def first_leaf(exc: BaseException, match: Callable[[BaseException], TypeGuard[E]]
               ) -> E | None:
    """``exc`` itself if it matches, else the first matching exception in its groups (depth
    first), else None. ``match`` sees groups too, so a caller may match a group as a whole;
    it should not raise (it runs while an exception is being handled)."""
    if match(exc):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = first_leaf(inner, match)
            if found is not None:
                return found
    return None
