"""``scoped-a2a`` / ``python -m scoped_a2a``: the command line's entry point.

This module imports nothing of the package at import time: the rest of the command line (and
the server, the client, the agent) is imported inside :func:`main`, where a Ctrl-C that lands
during those imports, or anywhere before a command's own SIGINT handling is installed, is exit
status 130 and one line instead of a KeyboardInterrupt traceback.

``--agent MODULE:ATTR`` is imported with the current folder on the Python path (as ``python -m``
puts it there), whichever way the command was started.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from .interrupt import interrupted

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Every start-up error (a bad option value, an agent that cannot be loaded, a missing extra,
    a port that cannot be bound, a store out of reach) is one line on stderr and exit status 2.
    A Ctrl-C before the command has installed its own handling is one line and 130; after it,
    each command says what it does (``serve`` shuts down gracefully, ``send`` gives up on its
    task by the abandon rule).
    """
    try:
        # Python's own handler again (``python -m`` set a quiet exit while it imported
        # __main__): KeyboardInterrupt is caught below, and trio and asyncio install their
        # handling only over Python's.
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            _put_back_default_sigint()
        return _main(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        message = exc.code if exc.code.startswith("error: ") else f"error: {exc.code}"
        sys.stderr.write(message + "\n")
        return EXIT_USAGE
    except BaseException as exc:
        if not interrupted(exc):
            raise
        # What the interrupt cut short may be half-built: an asyncio event loop interrupted in
        # its __init__ fails in its __del__ ("no attribute '_signal_handlers'") once the
        # exception, which holds it, is freed. The command is leaving: nothing more to say.
        sys.unraisablehook = _say_nothing
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED


def _say_nothing(unraisable: object) -> None:
    """``sys.unraisablehook`` after a Ctrl-C: the one line has been written."""


def _put_back_default_sigint() -> None:
    """Python's SIGINT handler, unless the program set its own (SIG_IGN, a handler of its own
    other than the package's quiet exit, main() called from another program)."""
    current = signal.getsignal(signal.SIGINT)
    if getattr(current, "__qualname__", "") == "_exit_quietly":
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _main(argv: Sequence[str] | None) -> int:
    import logging

    from .parser import build_parser

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # serve --workers starts these
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if getattr(args, "log_format", "text") == "json":
        from ..observe.logs import use_json_logs

        use_json_logs(getattr(logging, args.log_level))
    if args.command == "serve":
        from .serve import run_serve

        return run_serve(args)
    if args.command == "send":
        from .send import run_send

        return run_send(args)
    if args.command in ("get", "list", "cancel", "subscribe"):
        from .tasks import run_task_command

        return run_task_command(args)
    if args.command == "worker":
        from .worker import run_worker_command

        return run_worker_command(args)
    return EXIT_USAGE
