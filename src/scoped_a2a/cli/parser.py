"""The parser's frame: the program, its ``--version``, and one subcommand per command, each
added by the module that runs it (:mod:`.serve`, :mod:`.worker`, :mod:`.send`,
:mod:`.tasks`)."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

from .help import HelpFormatter, Parser, prog_name
from .send import add_send_parser
from .serve import add_serve_parser
from .tasks import add_task_commands
from .worker import add_worker_parser

DESCRIPTION = """\
Serve an A2A agent; send it a message, look at or cancel its tasks; or run a worker
for a Redis or PostgreSQL store.

server:  serve, worker
client:  send, get, list, cancel, subscribe"""


def _version() -> str:
    try:
        return version("scoped-a2a")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line's parser (docs/cli.md is generated from it)."""
    p = Parser(prog=prog_name(), formatter_class=HelpFormatter, description=DESCRIPTION,
               epilog="Each command has its own options: COMMAND --help.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_parser(sub)
    add_send_parser(sub)
    add_task_commands(sub)  # get, list, cancel, subscribe
    add_worker_parser(sub)
    return p
