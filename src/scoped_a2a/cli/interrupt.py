"""Telling a Ctrl-C apart (no I/O; imports only the exception-group walk): what every command
catches so that a SIGINT at any moment is exit status 130 and one line, never a traceback.

Before a command installs its own SIGINT handling (in the event loop), Python's default handler
raises KeyboardInterrupt wherever the main thread is: in an import, in argument parsing, in a
task of the loop, where a task group may wrap it in an exception group with the cancellations
it caused.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any, TypeGuard

from ..protocol.exc_groups import first_leaf


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt, or a group holding one (the rest of the group
    being what the interrupt caused)."""
    return first_leaf(exc, _is_interrupt) is not None


_seen = False


def watch_ctrl_c() -> Callable[[], None]:
    """Until the returned ``undo`` is called: SIGINT raises KeyboardInterrupt as Python's own
    handler does, and is also remembered, for :func:`ctrl_c_seen`. Installed only over Python's
    handler or the package's quiet exit (a program's own, or SIG_IGN, is left alone).

    The KeyboardInterrupt alone can be lost (seen on a loaded machine): raised inside a
    callback whose exceptions Python ignores (the import machinery's weakref callback
    ``_get_module_lock.<locals>.cb``, a ``__del__``) it is printed as "Exception ignored" with
    a traceback and dropped, and the command ran on; raised while a C extension imports
    (msgspec's ``PyCapsule_Import`` of datetime) it became an ImportError. A dropped one is
    kept quiet here (the command says "interrupted" itself).
    """
    global _seen
    _seen = False
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, None) or getattr(
            signal.getsignal(signal.SIGINT), "__qualname__", "") == "_exit_quietly":
        signal.signal(signal.SIGINT, _remember_sigint)
    previous_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        global _seen
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _seen = True
            return
        previous_hook(unraisable)

    sys.unraisablehook = hook

    def undo() -> None:
        python_sigint()
        if sys.unraisablehook is hook:  # else replaced since: left as it is
            sys.unraisablehook = previous_hook

    return undo


def python_sigint() -> None:
    """Python's own SIGINT handler again, if :func:`watch_ctrl_c` installed its own: before a
    command's event loop starts (trio and asyncio install their handling only over Python's
    handler; a loop's own SIGINT handling sees a Ctrl-C from then on)."""
    if signal.getsignal(signal.SIGINT) is _remember_sigint:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def ctrl_c_seen() -> bool:
    """Whether a SIGINT came since :func:`watch_ctrl_c` (raised, turned into another error, or
    dropped by Python): each command's own SIGINT handling asks once it is installed."""
    return _seen


def _remember_sigint(signum: int, frame: object) -> None:
    global _seen
    _seen = True
    raise KeyboardInterrupt


def _is_interrupt(exc: BaseException) -> TypeGuard[KeyboardInterrupt]:
    return isinstance(exc, KeyboardInterrupt)
