"""Starting a server command (``serve``, ``worker``): the checks before the event loop, the
loop itself, and its start-up failures worded for a person.

A port that cannot be bound, a name that does not resolve or a store out of reach
(:class:`.help.StartupError`) is one line on stderr and exit status 2. A Ctrl-C that lands
before the command's own signal handling is installed ends it with status 130 and one line.
"""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from typing import TYPE_CHECKING, Any, TypeGuard

import anyio

from ..protocol.exc_groups import first_leaf
from .auth_options import tls_from_args
from .help import StartupError
from .interrupt import interrupted, python_sigint

if TYPE_CHECKING:
    from ..server.app import A2AApp

EXIT_INTERRUPTED = 130


def check_host(host: str, port: int) -> None:
    """SystemExit with one line when ``--host`` does not resolve (before the loop starts)."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise SystemExit(
            f"cannot listen on {host}: the name does not resolve; check --host") from None


async def listen(args: argparse.Namespace, app: A2AApp, shutdown: anyio.Event) -> None:
    """Serve ``app`` where ``serve``'s options say until ``shutdown`` is set and the app has
    drained (:func:`scoped_a2a.server.serve.serve`); cancelled, it stops with no grace."""
    from ..server.serve import serve

    await serve(app, host=args.host, port=args.port, shutdown=shutdown, grace=args.grace,
                http2=args.http2, gc_tuning=not args.no_gc_tuning,
                memory_trim=not args.no_memory_trim,
                reuse_port=getattr(args, "reuse_port", False),
                header_timeout=args.header_timeout, **tls_from_args(args))


def listen_error(exc: BaseException) -> OSError | StartupError | None:
    """The error that stopped the server from starting, found in ``exc``'s groups: a socket
    error of listening (hypercorn re-raises a failed name lookup as a plain OSError with the
    lookup's negative errno), or a StartupError."""
    return first_leaf(exc, _is_listen_error)


def _is_listen_error(exc: BaseException) -> TypeGuard[OSError | StartupError]:
    if isinstance(exc, StartupError):
        return True
    return isinstance(exc, OSError) and (
        isinstance(exc, socket.gaierror) or (exc.errno or 0) < 0
        or exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL))


def listen_message(exc: OSError | StartupError, host: str, port: int) -> str:
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


def run_server(func: Any, *args: Any, backend: str, host: str, port: int) -> int:
    """``anyio.run`` a server command; returns its exit status: 0 once it has shut down, 2
    with one line for a port that cannot be bound or another start-up error, 130 with one
    line for a Ctrl-C before its signal handling was installed (KeyboardInterrupt, alone or
    in an exception group)."""
    try:
        python_sigint()
        anyio.run(func, *args, backend=backend)
    except BaseException as exc:
        if interrupted(exc):
            sys.stderr.write("interrupted\n")
            return EXIT_INTERRUPTED
        if not isinstance(exc, Exception):
            raise
        found = listen_error(exc)
        if found is None:
            raise
        sys.stderr.write(f"error: {listen_message(found, host, port)}\n")
        return 2
    return 0
