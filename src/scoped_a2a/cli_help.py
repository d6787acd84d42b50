"""The command line's help formatting and the options every command shares (no I/O)."""

from __future__ import annotations

import argparse

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
