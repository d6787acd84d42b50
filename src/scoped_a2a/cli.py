"""``python -m scoped_a2a``: the command line.

``serve`` runs an agent (the built-in demo by default) under hypercorn on trio or asyncio. SIGINT
and SIGTERM start a graceful shutdown (new sends refused, runs get ``--grace`` seconds, the rest
are cancelled and recorded); a second signal stops at once. ``send`` sends one message to an agent
and prints the task as it runs (:mod:`scoped_a2a.client.cli_send`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup

from .client.cli_send import add_send_parser, run_send
from .redis_cli import add_store_options, add_worker_command, run_worker, serve_on_redis
from .runtime.policy import RunPolicy

log = logging.getLogger("scoped_a2a.cli")


def load_agent(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted) from the Python path."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"--agent must look like MODULE:ATTR, not {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"cannot import agent module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise SystemExit(f"{spec} is not callable; an agent is an async callable")
    return obj


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scoped_a2a", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve an agent over A2A")
    s.add_argument("--agent", default="scoped_a2a.agents.demo:demo_agent",
                   help="MODULE:ATTR of the agent (default: the built-in demo agent)")
    s.add_argument("--backend", choices=["trio", "asyncio"], default="trio")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--detach-metadata", action="append", default=[], metavar="KEY=V1,V2",
                   help="detach runs whose message or request metadata has KEY set to one of "
                        "the values (repeatable; KEY alone matches any value)")
    s.add_argument("--no-cancel-on-disconnect", action="store_true",
                   help="detach every run: no run is cancelled when its caller hangs up")
    s.add_argument("--grace", type=float, default=10.0,
                   help="seconds runs get to finish on shutdown (default 10)")
    s.add_argument("--public-url", help="the URL the agent card advertises (behind a proxy)")
    s.add_argument("--max-body-bytes", type=int, default=8 << 20)
    s.add_argument("--max-ended-tasks", type=int, default=10_000,
                   help="ended tasks kept in memory (oldest evicted first)")
    s.add_argument("--log-level", default="INFO")
    s.add_argument("--http2", action="store_true",
                   help="also accept HTTP/2 (h2c) clients; off by default because hypercorn's "
                        "HTTP/2 layer loses requests under load (docs/connections.md)")
    # Push notifications (scoped_a2a.push).
    s.add_argument("--allow-webhook-host", action="append", default=[], metavar="HOST",
                   help="allow push webhooks on HOST although it is (or resolves to) a "
                        "loopback, private, link-local or reserved address; HOST is a name, an "
                        "address or a network such as 10.8.0.0/16 (repeatable)")
    s.add_argument("--push-bearer-token", default=os.environ.get("SCOPED_A2A_PUSH_BEARER_TOKEN"),
                   help="send 'Authorization: Bearer TOKEN' with deliveries whose config has no "
                        "authentication (default: $SCOPED_A2A_PUSH_BEARER_TOKEN)")
    s.add_argument("--push-signing-secret",
                   default=os.environ.get("SCOPED_A2A_PUSH_SIGNING_SECRET"),
                   help="sign deliveries with HMAC-SHA256 (Standard Webhooks headers) "
                        "(default: $SCOPED_A2A_PUSH_SIGNING_SECRET)")
    s.add_argument("--no-push", action="store_true", help="switch push notifications off")
    add_send_parser(sub)
    # --- Redis: shared tasks, durable detached runs, the worker command (redis_cli.py) ---
    add_store_options(s)
    add_worker_command(sub)
    return p


async def _serve(args: argparse.Namespace) -> None:
    from .push import PushSettings
    from .server.app import A2AApp
    from .server.serve import serve
    from .store.base import TaskStore
    from .store.memory import MemoryTaskStore

    policy = RunPolicy.from_rules(
        args.detach_metadata, cancel_on_disconnect=not args.no_cancel_on_disconnect
    )
    agent = load_agent(args.agent)

    def make_app(store: TaskStore, detached: TaskGroup | None = None) -> A2AApp:
        return A2AApp(
            agent,
            policy=policy,
            grace=args.grace,
            public_url=args.public_url,
            max_body_bytes=args.max_body_bytes,
            store=store,
            detached=detached,
            push=PushSettings(
                enabled=not args.no_push,
                allow_hosts=tuple(args.allow_webhook_host),
                bearer_token=args.push_bearer_token or None,
                signing_secret=args.push_signing_secret or None,
            ),
        )

    if args.store != "memory":  # Redis (redis_cli.py)
        await serve_on_redis(args, make_app, _on_signals)
        return
    app = make_app(MemoryTaskStore(max_ended_tasks=args.max_ended_tasks))
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_on_signals, shutdown, tg.cancel_scope)
        await serve(app, host=args.host, port=args.port, shutdown=shutdown, grace=args.grace,
                    http2=args.http2)
        tg.cancel_scope.cancel()


async def _on_signals(shutdown: anyio.Event, scope: anyio.CancelScope) -> None:
    """The first SIGINT/SIGTERM sets ``shutdown`` (graceful); a second cancels ``scope``."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if shutdown.is_set():
                log.warning("second signal: stopping now")
                scope.cancel()
                return
            log.info("%s: shutting down gracefully", signal.Signals(signum).name)
            shutdown.set()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "serve":
        try:
            anyio.run(_serve, args, backend=args.backend)
        except KeyboardInterrupt:
            return 130
        return 0
    if args.command == "send":
        return run_send(args)
    if args.command == "worker":  # Redis (redis_cli.py)
        try:
            anyio.run(run_worker, args, load_agent(args.agent), _on_signals,
                      backend=args.backend)
        except KeyboardInterrupt:
            return 130
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
