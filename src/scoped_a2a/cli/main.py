"""``scoped-a2a`` / ``python -m scoped_a2a``: the command line's entry point.

This module imports nothing of the package at import time: the rest of the command line (and
the server, the client, the agent) is imported inside :func:`main`, where a Ctrl-C that lands
during those imports, or anywhere before a command's own SIGINT handling is installed, is exit
status 130 and one line instead of a KeyboardInterrupt traceback.

``--agent MODULE:ATTR`` is imported with the current folder on the Python path (as ``python -m``
puts it there), whichever way the command was started.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .interrupt import ctrl_c_seen, interrupted, watch_ctrl_c

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
    # Python's handler, remembering each Ctrl-C (``python -m`` set a quiet exit while it
    # imported __main__): KeyboardInterrupt is caught below; before a command's event loop
    # starts, Python's own handler is put back (trio and asyncio install theirs only over it).
    undo = watch_ctrl_c()
    try:
        return _main(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        message = exc.code if exc.code.startswith("error: ") else f"error: {exc.code}"
        sys.stderr.write(message + "\n")
        return EXIT_USAGE
    except BaseException as exc:
        # A Ctrl-C that C code turned into another error (an ImportError from an extension's
        # import) is still a Ctrl-C.
        if not interrupted(exc) and not ctrl_c_seen():
            raise
        # What the interrupt cut short may be half-built: an asyncio event loop interrupted in
        # its __init__ fails in its __del__ ("no attribute '_signal_handlers'") once the
        # exception, which holds it, is freed. The command is leaving: nothing more to say.
        sys.unraisablehook = _say_nothing
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    finally:
        undo()


def _say_nothing(unraisable: object) -> None:
    """``sys.unraisablehook`` after a Ctrl-C: the one line has been written."""


def _main(argv: Sequence[str] | None) -> int:
    import logging

    from .option_scope import given_options
    from .parser import build_parser

    parser = build_parser()
    args = parser.parse_args(argv)
    args.given = given_options(parser, args)  # what serve and worker check for options unused
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
