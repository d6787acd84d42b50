"""``serve``'s options, one argument group per concern, in the order ``serve --help`` shows them.

Each ``add_*`` adds one group to the ``serve`` parser (:mod:`.serve` decides the order; the
stores' group is :func:`.stores.add_store_options`, authentication's is in
:mod:`.auth_options`, observability's in :mod:`.observe_options`). A group's description is a
one-line summary: ``serve --help`` and docs/cli.md show it above the group's options. The
defaults and limits are documented where they act (docs/connections.md, docs/memory.md,
docs/grpc.md, docs/console.md).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from ..agent_loading import DEFAULT_AGENT
from ..runtime.policy import DEFAULT_INPUT_TIMEOUT, DEFAULT_MAX_PARKED_RUNS
from ..server.grpc import DEFAULT_MAX_FIELDS as DEFAULT_GRPC_MAX_FIELDS
from ..server.header_deadline import HEADER_TIMEOUT
from .arg_types import at_least_one, parse_size, port, seconds, seconds_or_zero

if TYPE_CHECKING:
    from ..push import PushSettings
    from ..server.console.access import ConsoleSettings


def add_listen_options(parser: argparse.ArgumentParser) -> None:
    """Where and how ``serve`` listens (docs/security.md for TLS), and the process's memory
    housekeeping (docs/memory.md)."""
    g = parser.add_argument_group(
        "listening and TLS",
        "Where serve listens, with which certificates, on which async library and allocator.")
    g.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    g.add_argument("--port", type=port, default=8000,
                   help="the port to listen on; 0 picks a free one")
    g.add_argument("--backend", choices=["trio", "asyncio"], default="trio",
                   help="the async library to run on")
    g.add_argument("--workers", type=at_least_one, default=1, metavar="N",
                   help="serve from N processes on the same port (SO_REUSEPORT), over a "
                        "shared store (--store redis://... or postgresql://...); a worker "
                        "that dies is started again; signals reach every worker "
                        "(docs/redis.md)")
    g.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    g.add_argument("--certfile", metavar="PEM", help="serve HTTPS with this certificate chain")
    g.add_argument("--keyfile", metavar="PEM", help="the private key of --certfile")
    g.add_argument("--ca-certs", metavar="PEM",
                   help="accept client certificates issued by this CA (mutual TLS): the "
                        "certificate's subject commonName is the caller's principal id; "
                        "clients without one need another credential")
    g.add_argument("--no-gc-tuning", action="store_true",
                   help="leave Python's garbage collector as configured (by default, once "
                        "started, serve freezes the start-up objects and raises the young "
                        "generation's threshold; also off with SCOPED_A2A_GC_TUNING=0)")
    g.add_argument("--no-memory-trim", action="store_true",
                   help="leave freed memory with the allocator (by default serve hands "
                        "what glibc's malloc holds free back to the system after bursts, "
                        "checked every 10 s; also off with SCOPED_A2A_MEMORY_TRIM=0)")


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The agent and the card it is published with."""
    g = parser.add_argument_group(
        "the agent and its card", "What is served, and the agent card that describes it.")
    g.add_argument("--agent", default=DEFAULT_AGENT,
                   help="MODULE:ATTR (or FILE.py:ATTR) of the agent: an async callable "
                        "taking a RunContext, an A2AApp, an a2a-sdk AgentExecutor, a Google "
                        "ADK agent or a pydantic-ai Agent (docs/adapters.md; the default is the "
                        "built-in demo agent)")
    g.add_argument("--card", metavar="FILE",
                   help="a JSON object of agent-card fields (name, description, skills...) "
                        "over the card the agent's framework or code gives")
    g.add_argument("--public-url",
                   help="the URL the agent card advertises, behind a proxy (default: the "
                        "request's own URL)")
    g.add_argument("--card-1-0-only", action="store_true",
                   help="serve an agent card without the 0.3 fields (url, preferredTransport, "
                        "protocolVersion), which the 1.0 card schema refuses; 0.3 clients "
                        "then cannot use the card (docs/conformance.md)")
    g.add_argument("--card-signing-key", metavar="PEM",
                   help="sign the agent card with this private key (RSA, EC or Ed25519); "
                        "its public JWKS is served at /.well-known/agent-card-jwks.json")
    g.add_argument("--card-signing-kid", metavar="KID",
                   help="the key id in the card's signature (default: the key's thumbprint)")


def add_transport_options(parser: argparse.ArgumentParser) -> None:
    """HTTP/2 and gRPC (docs/connections.md, docs/grpc.md)."""
    g = parser.add_argument_group(
        "transports", "JSON-RPC and HTTP+JSON are always on; HTTP/2 and gRPC on request.")
    g.add_argument("--http2", action="store_true",
                   help="also accept HTTP/2 (h2c) clients; off by default because its known "
                        "hypercorn bugs are worked around by patching hypercorn's private "
                        "HTTP/2 code (docs/connections.md)")
    g.add_argument("--grpc", action="store_true",
                   help="also serve A2A's gRPC binding on the same port (HTTP/2 with "
                        "content-type application/grpc; turns HTTP/2 on; needs the [grpc] "
                        "extra; docs/grpc.md)")
    g.add_argument("--grpc-max-fields", type=at_least_one, default=DEFAULT_GRPC_MAX_FIELDS,
                   metavar="N",
                   help="refuse a gRPC request message holding more protobuf fields than this "
                        "(RESOURCE_EXHAUSTED), before decoding it: decoding costs the event "
                        "loop time per field; every metadata entry counts 4")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Which runs outlive their caller, and how runs end (docs/memory.md for the parked)."""
    g = parser.add_argument_group(
        "runs and detach rules",
        "Which runs survive their caller's hang-up, and how long runs may wait or finish.")
    g.add_argument("--detach-metadata", action="append", default=[], metavar="KEY=V1,V2",
                   help="detach runs whose message or request metadata has KEY set to one of "
                        "the values (repeatable; KEY alone matches any value)")
    g.add_argument("--no-cancel-on-disconnect", action="store_true",
                   help="detach every run: no run is cancelled when its caller hangs up")
    g.add_argument("--grace", type=seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="seconds runs get to finish on shutdown")
    g.add_argument("--input-timeout", type=seconds, default=DEFAULT_INPUT_TIMEOUT,
                   metavar="SECONDS",
                   help="how long a run waits for the answer to ctx.ask; then its task fails "
                        "with reason input-timeout")
    g.add_argument("--max-parked-runs", type=at_least_one, default=DEFAULT_MAX_PARKED_RUNS,
                   metavar="N",
                   help="runs that may wait for input (ctx.ask) at once; once reached, a run "
                        "that asks fails with reason parked-limit")
    g.add_argument("--expose-errors", action="store_true",
                   help="send the full text of an agent's exceptions to callers (development); "
                        "by default they see the type and an error id that is in the log")


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """Request bodies, streams and per-caller limits (docs/connections.md)."""
    g = parser.add_argument_group(
        "limits and bodies",
        "Bounds on request bodies, streams, and each caller's runs (-32029 beyond them).")
    g.add_argument("--max-body-bytes", type=at_least_one, default=8 << 20, metavar="BYTES",
                   help="larger request bodies are refused with 413")
    g.add_argument("--header-timeout", type=seconds, default=HEADER_TIMEOUT, metavar="SECONDS",
                   help="an HTTP/1.1 request's line and headers must arrive within this long "
                        "of their first byte, or the connection gets 408 and is closed "
                        "(a client trickling them would hold it); on an idle HTTP/2 "
                        "connection, the same for an unfinished frame or header block "
                        f"(GOAWAY); default {HEADER_TIMEOUT:g}")
    g.add_argument("--body-timeout", type=seconds, default=60.0, metavar="SECONDS",
                   help="a request body must arrive whole within this long, or the request "
                        "gets 408 (gRPC: DEADLINE_EXCEEDED); default 60")
    g.add_argument("--max-body-memory", type=parse_size, default=128 << 20, metavar="SIZE",
                   help="bytes of unfinished request bodies held at once, over all "
                        "requests (each body's first 64 KiB are counted apart, against "
                        "SIZE again); a body that would pass it gets 503 (gRPC: "
                        "UNAVAILABLE). SIZE is bytes or e.g. 64MiB; default 128MiB")
    g.add_argument("--stream-write-timeout", type=seconds, default=30.0, metavar="SECONDS",
                   help="close a connection whose client has taken no bytes for this long "
                        "(a stream that stopped being read; default 30)")
    g.add_argument("--keepalive", type=seconds, default=15.0, metavar="SECONDS",
                   help="send a keep-alive comment on a stream with nothing written for this "
                        "long")
    # Per principal (without authentication, all callers are one).
    g.add_argument("--max-runs-per-caller", type=at_least_one, metavar="N",
                   help="runs one caller (one principal; without authentication, all callers "
                        "are one) may have working at once; a new task beyond it is refused "
                        "with -32029")
    g.add_argument("--max-parked-per-caller", type=at_least_one, metavar="M",
                   help="tasks of one caller that may wait for its input at once")


def add_push_options(parser: argparse.ArgumentParser) -> None:
    """Push notifications (scoped_a2a.push, docs/wire.md)."""
    g = parser.add_argument_group(
        "push notifications", "Webhook deliveries of task updates: where to, and signed how.")
    g.add_argument("--allow-webhook-host", action="append", default=[], metavar="HOST",
                   help="allow push webhooks on HOST although it is (or resolves to) a "
                        "loopback, private, link-local or reserved address; HOST is a "
                        "name, an address or a network such as 10.8.0.0/16 (repeatable)")
    g.add_argument("--push-bearer-token",
                   default=os.environ.get("SCOPED_A2A_PUSH_BEARER_TOKEN"),
                   help="send 'Authorization: Bearer TOKEN' with deliveries whose config "
                        "has no authentication (default: $SCOPED_A2A_PUSH_BEARER_TOKEN)")
    g.add_argument("--push-signing-secret",
                   default=os.environ.get("SCOPED_A2A_PUSH_SIGNING_SECRET"),
                   help="sign deliveries with HMAC-SHA256 (Standard Webhooks headers) "
                        "(default: $SCOPED_A2A_PUSH_SIGNING_SECRET)")
    g.add_argument("--no-push", action="store_true", help="switch push notifications off")


def push_settings(args: argparse.Namespace) -> PushSettings:
    """The push settings :func:`add_push_options` asked for (``serve`` and ``worker``)."""
    from ..push import PushSettings

    return PushSettings(
        enabled=not args.no_push,
        allow_hosts=tuple(args.allow_webhook_host),
        bearer_token=args.push_bearer_token or None,
        signing_secret=args.push_signing_secret or None,
    )


def add_console_options(parser: argparse.ArgumentParser) -> None:
    """The live console (server/console, docs/console.md)."""
    g = parser.add_argument_group(
        "console", "The live console at /console: runs in flight and why they ended.")
    g.add_argument("--console", action="store_true",
                   help="serve the live console at /console: runs in flight, who holds them, "
                        "why they ended (off by default; docs/console.md)")
    g.add_argument("--console-operator", action="append", default=[], metavar="PRINCIPAL",
                   help="a principal id that sees (and may cancel) every run on the console; "
                        "others see their own (repeatable)")
    g.add_argument("--console-operator-scope", metavar="SCOPE",
                   help="a JWT scope whose bearer is a console operator")


def console_settings(args: argparse.Namespace) -> ConsoleSettings | None:
    """``--console``'s settings, or None (then nothing of the console is imported)."""
    if not args.console:
        return None
    from ..server.console.access import ConsoleSettings

    return ConsoleSettings(frozenset(args.console_operator), args.console_operator_scope)
