"""What every command of the command line shares (no I/O): help formatting, ``--log-level``, the
program's name, one-line argument errors, and the start-up error every command reports the same
way (one line on stderr, exit status 2)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and epilogs, and shows each option's default.

    ``(default: X)`` is appended to an option's help unless it has no meaningful default
    (None, False, an empty list) or its help already says what the default is.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default in (None, False, [], argparse.SUPPRESS)
                or "default" in text):
            return text
        return f"{text} (default: %(default)s)"


def add_log_level(parser: argparse.ArgumentParser, default: str) -> None:
    """``--log-level``: one of LOG_LEVELS, any case; anything else is refused."""
    parser.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=default,
                        metavar="LEVEL",
                        help="log level: " + ", ".join(LOG_LEVELS).lower())


def prog_name() -> str:
    """How the user started the command line: ``scoped-a2a`` or ``python -m scoped_a2a``."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "scoped-a2a" if name.startswith("scoped-a2a") else "python -m scoped_a2a"


class StartupError(Exception):
    """A command could not start (a store out of reach, ...): one line on stderr, exit 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: what is wrong, and where help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")
