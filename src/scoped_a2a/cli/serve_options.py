"""``serve``'s options, by concern: requests and transports, memory, push, the console.

Each ``add_*_options`` adds one group's options to the ``serve`` parser (``cli.py`` decides the
order); :func:`console_settings` turns the console's into settings. The defaults and limits are
documented where they act (docs/connections.md, docs/memory.md, docs/grpc.md, docs/console.md).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from ..runtime.policy import DEFAULT_INPUT_TIMEOUT, DEFAULT_MAX_PARKED_RUNS
from ..server.grpc import DEFAULT_MAX_FIELDS as DEFAULT_GRPC_MAX_FIELDS
from ..store.memory import DEFAULT_MAX_ENDED_BYTES
from .arg_types import at_least_one, parse_size, seconds

if TYPE_CHECKING:
    from ..server.console.access import ConsoleSettings


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """Request bodies and streams (docs/connections.md)."""
    parser.add_argument("--max-body-bytes", type=at_least_one, default=8 << 20, metavar="BYTES",
                        help="larger request bodies are refused with 413")
    parser.add_argument("--body-timeout", type=seconds, default=60.0, metavar="SECONDS",
                        help="a request body must arrive whole within this long, or the request "
                             "gets 408 (gRPC: DEADLINE_EXCEEDED); default 60")
    parser.add_argument("--max-body-memory", type=parse_size, default=128 << 20, metavar="SIZE",
                        help="bytes of unfinished request bodies held at once, over all "
                             "requests (each body's first 64 KiB are counted apart, against "
                             "SIZE again); a body that would pass it gets 503 (gRPC: "
                             "UNAVAILABLE). SIZE is bytes or e.g. 64MiB; default 128MiB")
    parser.add_argument("--stream-write-timeout", type=seconds, default=30.0, metavar="SECONDS",
                        help="close a connection whose client has taken no bytes for this long "
                             "(a stream that stopped being read; default 30)")
    parser.add_argument("--keepalive", type=seconds, default=15.0, metavar="SECONDS",
                        help="send a keep-alive comment on a stream with nothing written for this "
                             "long")


def add_transport_options(parser: argparse.ArgumentParser) -> None:
    """HTTP/2 and gRPC (docs/connections.md, docs/grpc.md)."""
    parser.add_argument("--http2", action="store_true",
                        help="also accept HTTP/2 (h2c) clients; off by default because its known "
                             "hypercorn bugs are worked around by patching hypercorn's private "
                             "HTTP/2 code (docs/connections.md)")
    parser.add_argument("--grpc", action="store_true",
                        help="also serve A2A's gRPC binding on the same port (HTTP/2 with "
                             "content-type application/grpc; turns HTTP/2 on; needs the [grpc] "
                             "extra; docs/grpc.md)")
    parser.add_argument("--grpc-max-fields", type=at_least_one, default=DEFAULT_GRPC_MAX_FIELDS,
                        metavar="N",
                        help="refuse a gRPC request message holding more protobuf fields than this "
                             "(RESOURCE_EXHAUSTED), before decoding it: decoding costs the event "
                             "loop time per field; every metadata entry counts 4")


def add_memory_options(parser: argparse.ArgumentParser) -> None:
    """What is kept in memory, and for how long (docs/memory.md)."""
    parser.add_argument("--max-ended-tasks", type=at_least_one, default=10_000, metavar="N",
                        help="ended tasks kept in memory (oldest evicted first)")
    parser.add_argument("--max-ended-bytes", type=parse_size, default=DEFAULT_MAX_ENDED_BYTES,
                        metavar="SIZE",
                        help="bytes of ended tasks kept in memory, as encoded JSON (oldest evicted "
                             "first); SIZE is bytes or e.g. 64MiB, 1GiB")
    parser.add_argument("--max-parked-runs", type=at_least_one, default=DEFAULT_MAX_PARKED_RUNS,
                        metavar="N",
                        help="runs that may wait for input (ctx.ask) at once; once reached, a run "
                             "that asks fails with reason parked-limit")
    parser.add_argument("--no-gc-tuning", action="store_true",
                        help="leave Python's garbage collector as configured (by default, once "
                             "started, serve freezes the start-up objects and raises the young "
                             "generation's threshold; also off with SCOPED_A2A_GC_TUNING=0)")
    parser.add_argument("--input-timeout", type=seconds, default=DEFAULT_INPUT_TIMEOUT,
                        metavar="SECONDS",
                        help="how long a run waits for the answer to ctx.ask; then its task fails "
                             "with reason input-timeout")


def add_push_options(parser: argparse.ArgumentParser) -> None:
    """Push notifications (scoped_a2a.push, docs/wire.md)."""
    parser.add_argument("--allow-webhook-host", action="append", default=[], metavar="HOST",
                        help="allow push webhooks on HOST although it is (or resolves to) a "
                             "loopback, private, link-local or reserved address; HOST is a "
                             "name, an address or a network such as 10.8.0.0/16 (repeatable)")
    parser.add_argument("--push-bearer-token",
                        default=os.environ.get("SCOPED_A2A_PUSH_BEARER_TOKEN"),
                        help="send 'Authorization: Bearer TOKEN' with deliveries whose config "
                             "has no authentication (default: $SCOPED_A2A_PUSH_BEARER_TOKEN)")
    parser.add_argument("--push-signing-secret",
                        default=os.environ.get("SCOPED_A2A_PUSH_SIGNING_SECRET"),
                        help="sign deliveries with HMAC-SHA256 (Standard Webhooks headers) "
                             "(default: $SCOPED_A2A_PUSH_SIGNING_SECRET)")
    parser.add_argument("--no-push", action="store_true", help="switch push notifications off")


def add_console_options(parser: argparse.ArgumentParser) -> None:
    """The live console (server/console, docs/console.md)."""
    parser.add_argument("--console", action="store_true",
                        help="serve the live console at /console: runs in flight, who holds them, "
                             "why they ended (off by default; docs/console.md)")
    parser.add_argument("--console-operator", action="append", default=[], metavar="PRINCIPAL",
                        help="a principal id that sees (and may cancel) every run on the console; "
                             "others see their own (repeatable)")
    parser.add_argument("--console-operator-scope", metavar="SCOPE",
                        help="a JWT scope whose bearer is a console operator")


def console_settings(args: argparse.Namespace) -> ConsoleSettings | None:
    """``--console``'s settings, or None (then nothing of the console is imported)."""
    if not args.console:
        return None
    from ..server.console.access import ConsoleSettings

    return ConsoleSettings(frozenset(args.console_operator), args.console_operator_scope)


