"""What every command of the command line shares (no I/O): help formatting, ``--log-level``, the
program's name, one-line argument errors with a suggestion, and the start-up error every command
reports the same way (one line on stderr, exit status 2)."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

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


def add_log_level(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                  default: str) -> None:
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


# argparse's wording (3.11 to 3.13 quote the choices differently; both are read).
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def nearest(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate closest to a mistyped ``word``, or None when none is close."""
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: what is wrong, the nearest option or
    command to a mistyped one, and the ``--help`` of the command that was given.

    argparse reports a subcommand's unknown options from the top-level parser (which knows no
    subcommand's options, and names its own help): :meth:`parse_args` hands them back to the
    subcommand's parser so the error names that command.
    """

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: Any = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self._subcommand(parsed) or self
            owner.error(owner._unrecognized(extras))
        assert isinstance(parsed, argparse.Namespace)
        return parsed

    def _subcommand(self, parsed: argparse.Namespace) -> Parser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(chosen, Parser):
                    return chosen
        return None

    def _unrecognized(self, extras: list[str]) -> str:
        message = "unrecognized arguments: " + " ".join(extras)
        options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        for word in extras:
            if word.startswith("--"):
                guess = nearest(word.split("=", 1)[0], options)
                if guess is not None:
                    return f"{message}; did you mean {guess}?"
        return message

    def error(self, message: str) -> NoReturn:
        help_of = self.prog
        match = _INVALID_CHOICE.search(message)
        if match is not None:
            choices = [c.strip().strip("'") for c in match.group(2).split(",")]
            guess = nearest(match.group(1), choices)
            if guess is not None:
                message = f"{message}; did you mean {guess}?"
                if message.startswith("argument COMMAND:"):  # the command meant has the help
                    help_of = f"{self.prog} {guess}"
        self.exit(2, f"error: {message} (see: {help_of} --help)\n")
