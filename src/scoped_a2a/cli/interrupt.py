"""Telling a Ctrl-C apart (no I/O; imports only the exception-group walk): what every command
catches so that a SIGINT at any moment is exit status 130 and one line, never a traceback.

Before a command installs its own SIGINT handling (in the event loop), Python's default handler
raises KeyboardInterrupt wherever the main thread is: in an import, in argument parsing, in a
task of the loop, where a task group may wrap it in an exception group with the cancellations
it caused.
"""

from __future__ import annotations

from typing import TypeGuard

from ..protocol.exc_groups import first_leaf


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt, or a group holding one (the rest of the group
    being what the interrupt caused)."""
    return first_leaf(exc, _is_interrupt) is not None


def _is_interrupt(exc: BaseException) -> TypeGuard[KeyboardInterrupt]:
    return isinstance(exc, KeyboardInterrupt)
