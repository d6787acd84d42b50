"""Telling a Ctrl-C apart (no I/O, imports nothing): what every command catches so that a SIGINT
at any moment is exit status 130 and one line, never a traceback.

Before a command installs its own SIGINT handling (in the event loop), Python's default handler
raises KeyboardInterrupt wherever the main thread is: in an import, in argument parsing, in a
task of the loop, where a task group may wrap it in an exception group with the cancellations
it caused.
"""

from __future__ import annotations


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt, or a group holding one (the rest of the group
    being what the interrupt caused)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(interrupted(e) for e in exc.exceptions)
    return False
