"""``worker --store redis://...|postgresql://...``: execute the detached runs ``serve`` queued in
Redis or PostgreSQL, with no HTTP server (the store module's ``run_worker`` does the work:
:func:`.store_redis.run_worker`, :func:`.store_postgres.run_worker`).

Run as many workers as you like against one Redis or one PostgreSQL schema. Each worker also
adopts push watches that a stopped process left (store/push_watches.py) and delivers them, so a
fleet of workers alone still pushes (the webhook options are ``serve``'s). SIGINT/SIGTERM:
take no new runs, give running ones ``--grace`` seconds, then leave the rest in the queue for
another worker; a second signal stops at once. An SQLite store is executed by its ``serve``
process (one process owns the file): ``worker`` refuses it with one line.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from ..agent_loading import DEFAULT_AGENT
from .arg_types import at_least_one, seconds_or_zero
from .help import HelpFormatter, add_log_level
from .option_scope import refuse_ignored_options
from .serve_options import add_push_options
from .signals import on_signals
from .startup import run_server
from .stores import add_queue_options, check_store_url, store_module_name

WORKER_DESCRIPTION = """\
Execute the detached runs that `serve --store redis://...` (or postgresql://...) queued, with
no HTTP server. Run as many workers as you like against one Redis or PostgreSQL.
Workers also deliver push notifications that a stopped serve process left (--allow-webhook-host
etc. as for serve). SIGINT/SIGTERM: take no new runs, give running ones --grace seconds, then
leave the rest in the queue for another worker."""


def add_worker_parser(sub: Any) -> None:
    """Add the ``worker`` subcommand to the CLI's subparsers."""
    w = sub.add_parser(
        "worker", help="execute queued detached runs from a Redis or PostgreSQL store",
        formatter_class=HelpFormatter, description=WORKER_DESCRIPTION)
    w.add_argument("--agent", default=DEFAULT_AGENT,
                   help="MODULE:ATTR (or FILE.py:ATTR) of the agent, as for serve (the "
                        "default is the built-in demo agent)")
    w.add_argument("--backend", choices=["trio", "asyncio"], default="trio",
                   help="the async library to run on")
    w.add_argument("--grace", type=seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="seconds runs get to finish on shutdown before they are left for "
                        "another worker")
    w.add_argument("--max-ended-tasks", type=at_least_one, default=10_000, metavar="N",
                   help="ended tasks kept in the Redis or PostgreSQL store (oldest evicted "
                        "first)")
    w.add_argument("--expose-errors", action="store_true",
                   help="send the full text of an agent's exceptions to callers (development)")
    add_log_level(w, "INFO")
    w.add_argument("--store", required=True, metavar="redis://HOST:PORT/DB|postgresql://...",
                   help="the Redis or PostgreSQL the servers use")
    add_queue_options(w)
    add_push_options(w)


async def _work(args: argparse.Namespace, agent: Any) -> None:
    """The worker until its shutdown: the signal handlers first, then the store."""
    run_worker = check_store_url(args.store).run_worker  # type: ignore[attr-defined]

    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(on_signals, shutdown, tg.cancel_scope)
        await run_worker(args, agent, shutdown)
        tg.cancel_scope.cancel()


def run_worker_command(args: argparse.Namespace) -> int:
    """Run ``worker``; returns the exit status (2 with one line for a bad agent or store)."""
    from ..agent_loading import load_agent

    agent = load_agent(args.agent, backend=args.backend).agent
    if args.store == "memory":  # a worker shares its store with servers: memory cannot be
        raise SystemExit(f"--store must be a redis:// or postgresql:// URL, not {args.store!r}")
    if not hasattr(check_store_url(args.store), "run_worker"):
        raise SystemExit("an SQLite store is executed by its serve process (one process owns "
                         "the file); the worker command is for a redis:// or postgresql:// "
                         "store")
    refuse_ignored_options(args, store_module_name(args.store))  # e.g. Redis's prefix on PG
    return run_server(_work, args, agent, backend=args.backend, host="", port=0)
