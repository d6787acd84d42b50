"""``python -m scoped_a2a``; the ``scoped-a2a`` script calls :func:`main` from here too."""

import os
import sys

from .cli.main import EXIT_INTERRUPTED
from .cli.main import main as run

__all__ = ["main"]


def main() -> int:
    """Run the command line as a program. An interrupted command (status 130: it has said so
    in one line) leaves at once: the interpreter's own finalization, reached while an import
    was cut short, can end the process by SIGINT instead (status -2, seen on a loaded
    machine)."""
    status = run()
    if status == EXIT_INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
