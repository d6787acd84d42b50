"""``serve``: run an agent (the built-in demo by default) under hypercorn on trio or asyncio.

Everything that can be checked is checked before the event loop starts (the agent, its card,
credentials, the store URL, extras, the host): a problem is one line and exit status 2. In the
loop, the signal handlers are installed first, so a SIGINT or SIGTERM at any moment after that
starts a graceful shutdown (new sends refused, runs get ``--grace`` seconds, the rest are
cancelled and recorded; exit status 0); a second signal stops at once. One earlier than that is
a KeyboardInterrupt: exit status 130 and one line (:mod:`.startup`).

The store is opened by the module :mod:`.stores` picks for ``--store``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import anyio

from .auth_options import (
    add_auth_options,
    authenticator_from_args,
    card_signer_from_args,
    limits_from_args,
)
from .help import HelpFormatter
from .observe_options import add_observe_options, observers_from
from .option_scope import refuse_ignored_options
from .serve_options import (
    add_agent_options,
    add_console_options,
    add_limit_options,
    add_listen_options,
    add_push_options,
    add_run_options,
    add_transport_options,
    console_settings,
    push_settings,
)
from .signals import serve_signals
from .startup import check_host, run_server
from .stores import StoreCommand, add_store_options, check_store_url, store_module_name

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..agent_loading import LoadedAgent
    from ..runtime.policy import RunPolicy
    from ..server.app import A2AApp
    from ..server.auth import Authenticator
    from ..server.card_signing import CardSigner
    from ..store.base import TaskStore

SERVE_DESCRIPTION = """\
Serve an agent over A2A 1.0 and 0.3 JSON-RPC at http://HOST:PORT/ (agent card at
/.well-known/agent-card.json) under hypercorn, on trio or asyncio.

The agent (--agent MODULE:ATTR, imported with the current folder on the Python path) is an
async callable taking a RunContext, or an agent of another framework served unchanged: an
a2a-sdk AgentExecutor, a Google ADK agent, a pydantic-ai Agent (docs/adapters.md).
SIGINT/SIGTERM: new sends are refused, runs get --grace seconds, the rest are cancelled and
recorded; a second signal stops at once. An option given where it does nothing (--retain with
the memory store, --redis-prefix without Redis, --console-operator without --console) is
refused in one line, exit status 2."""


def add_serve_parser(sub: Any) -> None:
    """Add ``serve`` to the CLI's subparsers: its options in groups, in the order a person
    looks for them (docs/cli.md shows the same groups)."""
    s = sub.add_parser("serve", help="serve an agent over A2A", description=SERVE_DESCRIPTION,
                       formatter_class=HelpFormatter, usage="%(prog)s [options]")
    add_listen_options(s)
    add_agent_options(s)
    add_transport_options(s)
    add_run_options(s)
    add_store_options(s)
    add_limit_options(s)
    add_push_options(s)
    add_auth_options(s)
    add_console_options(s)
    add_observe_options(s)


def _policy(args: argparse.Namespace) -> RunPolicy:
    """``serve``'s run policy; SystemExit with one line for a bad ``--detach-metadata``."""
    from ..runtime.policy import RunPolicy

    try:
        return RunPolicy.from_rules(
            args.detach_metadata, cancel_on_disconnect=not args.no_cancel_on_disconnect,
            input_timeout=args.input_timeout, max_parked_runs=args.max_parked_runs,
        )
    except ValueError as exc:
        raise SystemExit(f"--detach-metadata: {exc}") from None


def _check_grpc_extra() -> None:
    """``--grpc`` without protobuf (the ``[grpc]`` extra): one line and exit 2, before the
    loop starts, instead of a traceback from building the app."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        raise SystemExit("--grpc needs protobuf: pip install 'scoped-a2a[grpc]'") from None


def run_serve(args: argparse.Namespace) -> int:
    """Run ``serve``; returns the exit status. Every start-up error is one line and exit 2
    (SystemExit with a message, or from :func:`.startup.run_server`)."""
    from ..agent_loading import load_agent, load_card
    from .workers import check_workers, run_workers

    check_workers(args)  # --workers N > 1 with a store the processes cannot share: one line
    refuse_ignored_options(args, store_module_name(args.store))  # e.g. --retain in memory
    # Loaded before the event loop starts: a bad --agent is one line, not a traceback.
    loaded = load_agent(args.agent, backend=args.backend)
    loaded.card.update(load_card(args.card))
    # Built here, before the loop: a bad key file, signing key, missing extra or
    # --detach-metadata is one line and exit 2, not a traceback.
    auth = authenticator_from_args(args)
    signer = card_signer_from_args(args)
    args.observers = observers_from(args)
    policy = _policy(args)
    store = check_store_url(args.store)
    if args.grpc:
        _check_grpc_extra()
    check_host(args.host, args.port)
    if args.workers > 1:  # everything checked once here; each worker checks it again
        return run_workers(args)
    # Imported here, not in the loop: the loop's first step is installing the signal handlers.
    from ..server.app import A2AApp

    return run_server(_serve, args, A2AApp, loaded, auth, signer, policy, store,
                      backend=args.backend, host=args.host, port=args.port)


async def _serve(args: argparse.Namespace, app_class: type[A2AApp], loaded: LoadedAgent,
                 auth: Authenticator | None, signer: CardSigner | None, policy: RunPolicy,
                 store: StoreCommand) -> None:
    """Serve until signalled, with what :func:`run_serve` built and checked before the loop.
    The signal handlers come first; a second signal cancels the whole of it."""
    def make_app(task_store: TaskStore, detached: TaskGroup | None = None) -> A2AApp:
        return app_class(
            loaded.agent,
            card=loaded.card,
            policy=policy,
            grace=args.grace,
            public_url=args.public_url,
            card_1_0_only=args.card_1_0_only,
            grpc=args.grpc,
            grpc_max_fields=args.grpc_max_fields,
            max_body_bytes=args.max_body_bytes,
            body_timeout=args.body_timeout,
            max_body_memory=args.max_body_memory,
            stream_write_timeout=args.stream_write_timeout,
            keepalive=args.keepalive,
            store=task_store,
            detached=detached,
            expose_errors=args.expose_errors,
            authenticate=auth,
            caller_limits=limits_from_args(args),
            card_signer=signer,
            observe=args.observers,
            console=console_settings(args),
            push=push_settings(args),
        )

    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        # Started (the signal handlers installed) before anything else in the loop: a signal
        # from here on is a graceful shutdown, never the default action (a KeyboardInterrupt
        # raised wherever the loop happens to be).
        await tg.start(serve_signals(auth), shutdown, tg.cancel_scope)
        await store.serve(args, make_app, shutdown)
        tg.cancel_scope.cancel()
