"""``scoped-a2a`` / ``python -m scoped_a2a``: serve an A2A agent, or talk to one.

``serve`` runs an agent (the built-in demo by default) under hypercorn on trio or asyncio. SIGINT
and SIGTERM start a graceful shutdown (new sends refused, runs get ``--grace`` seconds, the rest
are cancelled and recorded); a second signal stops at once. ``send`` sends one message to an agent
and prints the task as it runs (:mod:`scoped_a2a.client.cli_send`). ``worker`` executes queued
runs from a Redis store (:mod:`scoped_a2a.redis_cli`).

``--agent MODULE:ATTR`` is imported with the current folder on the Python path (as ``python -m``
puts it there), whichever way the command was started.
"""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..agent_loading import DEFAULT_AGENT, LoadedAgent, load_agent, load_card
from ..observe.logs import use_json_logs
from ..runtime.policy import RunPolicy
from .arg_types import port, seconds_or_zero
from .auth_options import (
    add_auth_options,
    add_limit_options,
    authenticator_from_args,
    card_signer_from_args,
    limits_from_args,
    reload_on_sighup,
    tls_from_args,
)
from .help import HelpFormatter, Parser, StartupError, add_log_level, prog_name
from .observe_options import add_observe_options, observers_from
from .send import add_send_parser, run_send
from .serve_options import (
    add_console_options,
    add_memory_options,
    add_push_options,
    add_request_options,
    add_transport_options,
    console_settings,
)
from .store_redis import (
    add_store_options,
    add_worker_command,
    check_store_url,
    run_worker,
    serve_on_redis,
)
from .tasks import add_task_commands, run_task_command

if TYPE_CHECKING:
    from ..server.auth import Authenticator
    from ..server.card_signing import CardSigner

log = logging.getLogger("scoped_a2a.cli")


SERVE_DESCRIPTION = """\
Serve an agent over A2A 1.0 and 0.3 JSON-RPC at http://HOST:PORT/ (agent card at
/.well-known/agent-card.json) under hypercorn, on trio or asyncio.

The agent (--agent MODULE:ATTR, imported with the current folder on the Python path) is an
async callable taking a RunContext, or an agent of another framework served unchanged: an
a2a-sdk AgentExecutor, a Google ADK agent, a pydantic-ai Agent (docs/adapters.md).
SIGINT/SIGTERM: new sends are refused, runs get --grace seconds, the rest are cancelled and
recorded; a second signal stops at once."""

def _version() -> str:
    try:
        return version("scoped-a2a")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=prog_name(), formatter_class=HelpFormatter,
        description="Serve an A2A agent; send it a message, look at or cancel its tasks; or "
                    "run a Redis worker.",
        epilog="Each command has its own options: COMMAND --help.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("serve", help="serve an agent over A2A", description=SERVE_DESCRIPTION,
                       formatter_class=HelpFormatter)
    s.add_argument("--agent", default=DEFAULT_AGENT,
                   help="MODULE:ATTR of the agent: an async callable taking a RunContext, an "
                        "A2AApp, an a2a-sdk AgentExecutor, a Google ADK agent or a pydantic-ai "
                        "Agent (docs/adapters.md; the default is the built-in demo agent)")
    s.add_argument("--card", metavar="FILE",
                   help="a JSON object of agent-card fields (name, description, skills...) "
                        "over the card the agent's framework or code gives")
    s.add_argument("--backend", choices=["trio", "asyncio"], default="trio",
                   help="the async library to run on")
    s.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    s.add_argument("--port", type=port, default=8000,
                   help="the port to listen on; 0 picks a free one")
    s.add_argument("--detach-metadata", action="append", default=[], metavar="KEY=V1,V2",
                   help="detach runs whose message or request metadata has KEY set to one of "
                        "the values (repeatable; KEY alone matches any value)")
    s.add_argument("--no-cancel-on-disconnect", action="store_true",
                   help="detach every run: no run is cancelled when its caller hangs up")
    s.add_argument("--grace", type=seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="seconds runs get to finish on shutdown")
    s.add_argument("--public-url",
                   help="the URL the agent card advertises, behind a proxy (default: the "
                        "request's own URL)")
    s.add_argument("--card-1-0-only", action="store_true",
                   help="serve an agent card without the 0.3 fields (url, preferredTransport, "
                        "protocolVersion), which the 1.0 card schema refuses; 0.3 clients "
                        "then cannot use the card (docs/conformance.md)")
    add_request_options(s)
    s.add_argument("--expose-errors", action="store_true",
                   help="send the full text of an agent's exceptions to callers (development); "
                        "by default they see the type and an error id that is in the log")
    add_memory_options(s)
    add_log_level(s, "INFO")
    add_transport_options(s)
    add_auth_options(s)
    add_limit_options(s)
    add_push_options(s)
    add_observe_options(s)
    add_console_options(s)
    add_send_parser(sub)
    add_task_commands(sub)  # get, list, cancel, subscribe
    # --- Redis: shared tasks, durable detached runs, the worker command (redis_cli.py) ---
    add_store_options(s)
    add_worker_command(sub)
    return p


async def _serve(args: argparse.Namespace, loaded: LoadedAgent, auth: Authenticator | None,
                 signer: CardSigner | None, policy: RunPolicy) -> None:
    """Serve until signalled, with what ``_main`` built and checked before the loop started."""
    from ..push import PushSettings
    from ..server.app import A2AApp
    from ..server.serve import serve
    from ..store.base import TaskStore
    from ..store.memory import MemoryTaskStore

    def make_app(store: TaskStore, detached: TaskGroup | None = None) -> A2AApp:
        return A2AApp(
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
            store=store,
            detached=detached,
            expose_errors=args.expose_errors,
            authenticate=auth,
            caller_limits=limits_from_args(args),
            card_signer=signer,
            observe=args.observers,
            console=console_settings(args),
            push=PushSettings(
                enabled=not args.no_push,
                allow_hosts=tuple(args.allow_webhook_host),
                bearer_token=args.push_bearer_token or None,
                signing_secret=args.push_signing_secret or None,
            ),
        )

    async def on_signals(shutdown: anyio.Event, scope: anyio.CancelScope, *,
                         task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as signals:
            if auth is not None:
                await signals.start(reload_on_sighup, auth)
            await _on_signals(shutdown, scope, task_status=task_status)
            signals.cancel_scope.cancel()

    if args.store != "memory":  # Redis (redis_cli.py)
        await serve_on_redis(args, make_app, on_signals)
        return
    app = make_app(MemoryTaskStore(max_ended_tasks=args.max_ended_tasks,
                                   max_ended_bytes=args.max_ended_bytes))
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        # Started (the signal handlers installed) before anything listens: a signal sent once
        # the server says where it listens is never the default action (which kills).
        await tg.start(on_signals, shutdown, tg.cancel_scope)
        await serve(app, host=args.host, port=args.port, shutdown=shutdown, grace=args.grace,
                    http2=args.http2, gc_tuning=not args.no_gc_tuning, **tls_from_args(args))
        tg.cancel_scope.cancel()


def _policy(args: argparse.Namespace) -> RunPolicy:
    """``serve``'s run policy; SystemExit with one line for a bad ``--detach-metadata``."""
    try:
        return RunPolicy.from_rules(
            args.detach_metadata, cancel_on_disconnect=not args.no_cancel_on_disconnect,
            input_timeout=args.input_timeout, max_parked_runs=args.max_parked_runs,
        )
    except ValueError as exc:
        raise SystemExit(f"--detach-metadata: {exc}") from None


def _check_host(host: str, port: int) -> None:
    """SystemExit with one line when ``--host`` does not resolve (before the loop starts)."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise SystemExit(
            f"cannot listen on {host}: the name does not resolve; check --host") from None


async def _on_signals(shutdown: anyio.Event, scope: anyio.CancelScope, *,
                      task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The first SIGINT/SIGTERM sets ``shutdown`` (graceful); a second cancels ``scope``.
    Reports started once the handlers are installed."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if shutdown.is_set():
                log.warning("second signal: stopping now")
                scope.cancel()
                return
            log.info("%s: shutting down gracefully", signal.Signals(signum).name)
            shutdown.set()


def _listen_error(exc: BaseException) -> OSError | StartupError | None:
    """The error that stopped the server from starting, found in ``exc``'s groups: a socket
    error of listening (hypercorn re-raises a failed name lookup as a plain OSError with the
    lookup's negative errno), or a StartupError."""
    if isinstance(exc, StartupError):
        return exc
    if isinstance(exc, OSError) and (
            isinstance(exc, socket.gaierror) or (exc.errno or 0) < 0
            or exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _listen_error(inner)
            if found is not None:
                return found
    return None


def _listen_message(exc: OSError | StartupError, host: str, port: int) -> str:
    if isinstance(exc, StartupError):
        return str(exc)
    if isinstance(exc, socket.gaierror) or (exc.errno or 0) < 0:
        return f"cannot listen on {host}: the name does not resolve; check --host"
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is in use; pick another with --port"
    if exc.errno == errno.EACCES:
        return (f"no permission to listen on port {port} of {host}; pick another with --port "
                "(ports below 1024 need privileges)")
    return f"cannot listen on {host}: it is not an address of this machine; check --host"


def _run_server(func: Any, *args: Any, backend: str, host: str, port: int) -> int:
    """``anyio.run`` a server command; a port that cannot be bound, or another start-up error,
    is one line and exit 2."""
    try:
        anyio.run(func, *args, backend=backend)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        found = _listen_error(exc)
        if found is None:
            raise
        sys.stderr.write(f"error: {_listen_message(found, host, port)}\n")
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Every start-up error (a bad option value, an agent that cannot be loaded, a missing extra,
    a port that cannot be bound, a store out of reach) is one line on stderr and exit status 2.
    """
    try:
        return _main(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        message = exc.code if exc.code.startswith("error: ") else f"error: {exc.code}"
        sys.stderr.write(message + "\n")
        return 2


def _check_grpc_extra() -> None:
    """``--grpc`` without protobuf (the ``[grpc]`` extra): one line and exit 2, before the
    loop starts, instead of a traceback from building the app."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        sys.stderr.write("error: --grpc needs protobuf: pip install 'scoped-a2a[grpc]'\n")
        raise SystemExit(2) from None


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if getattr(args, "log_format", "text") == "json":
        use_json_logs(getattr(logging, args.log_level))
    if args.command == "serve":
        # Loaded before the event loop starts: a bad --agent is one line, not a traceback.
        loaded = load_agent(args.agent, backend=args.backend)
        loaded.card.update(load_card(args.card))
        # Built here, before the loop: a bad key file, signing key, missing extra or
        # --detach-metadata is one line and exit 2, not a traceback.
        auth = authenticator_from_args(args)
        signer = card_signer_from_args(args)
        args.observers = observers_from(args)
        policy = _policy(args)
        if args.store != "memory":
            check_store_url(args.store)
        if args.grpc:
            _check_grpc_extra()
        _check_host(args.host, args.port)
        return _run_server(_serve, args, loaded, auth, signer, policy, backend=args.backend,
                           host=args.host, port=args.port)
    if args.command == "send":
        return run_send(args)
    if args.command in ("get", "list", "cancel", "subscribe"):
        return run_task_command(args)
    if args.command == "worker":  # Redis (redis_cli.py)
        agent = load_agent(args.agent, backend=args.backend).agent
        check_store_url(args.store)
        return _run_server(run_worker, args, agent, _on_signals, backend=args.backend,
                           host="", port=0)
    return 2


if __name__ == "__main__":
    sys.exit(main())
