"""What the client commands (``send``, ``get``, ``list``, ``cancel``, ``subscribe``) share: the
connection options (credentials, TLS, version, binding, ``--timeout``), one exit status per
outcome, and failures worded for a person, printed once on stderr.

``--timeout`` bounds the whole command: when it passes, the call is abandoned (its connection
closed, so the agent sees a hang-up and cancels an interactive run) and the command exits 124.
Ctrl-C (SIGINT) ends the command the same way, with status 130. A command that started a task
(``send``) gives up on it by the abandon rule (CancelTask unless its run is
detached; :mod:`scoped_a2a.client.abandon`) and says what happened to it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import ssl
import sys
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import anyio
import httpx

from ..client.auth import ApiKey, BearerToken
from ..client.card_verify import CardSignatureError
from ..client.client import A2AClient
from ..client.connection import card_url
from ..client.errors import AgentHTTPError, AgentTimeout, AgentUnreachable, TransportError
from ..protocol.errors import (
    A2AError,
    InvalidAgentResponse,
    PermissionDenied,
    TaskNotFound,
    Unauthenticated,
    UnsupportedOperation,
    VersionNotSupported,
)
from .arg_types import seconds
from .help import add_log_level
from .interrupt import ctrl_c_seen, interrupted, python_sigint

EXIT_OK = 0
EXIT_TASK_FAILED = 1
EXIT_USAGE = 2
EXIT_AGENT_ERROR = 3
EXIT_NOT_CANCELED = 4
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

def exit_status(ok: str, *, usage: str = "", task: bool = True,
                extra: tuple[str, ...] = ()) -> str:
    """A command's exit-status epilog: ``ok`` says what 0 means; ``task`` adds status 1;
    ``extra``: lines of the command's own statuses (after 3)."""
    lines = ["exit status:", f"  0    {ok}"]
    if task:
        lines.append("  1    the task failed, was canceled or was rejected")
    lines += [
        f"  2    bad command line{usage}",
        "  3    the agent is unreachable, is not an A2A agent, or refused the call",
        *extra,
        "  124  --timeout passed before the command ended (the call was abandoned)",
        "  130  interrupted (Ctrl-C)",
    ]
    return "\n".join(lines)


class UsageError(Exception):
    """A bad option found after parsing (an unreadable certificate file, ...): exit 2."""


def http_url(text: str) -> str:
    """An http(s) URL with a host (argparse type)."""
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:  # e.g. an unclosed [ of an IPv6 address
        parts = urllib.parse.SplitResult("", "", "", "", "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL: give the agent's base URL, such as "
            "http://127.0.0.1:8000/")
    return text


CALL_TIMEOUT = 30.0
"""Seconds connecting, the card fetch and each quick call may take when ``--timeout`` is not
given (a blocking send and a stream's events have no deadline then)."""


def add_client_options(p: argparse.ArgumentParser, *, timeout: float | None = CALL_TIMEOUT
                       ) -> None:
    """The options every client command takes, after its own. ``timeout=None``: by default
    the command has no overall deadline (a turn or a subscription may last long)."""
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--a2a-version", choices=["1.0", "0.3"],
                   help="protocol version to speak (default: the card's choice)")
    p.add_argument("--transport", choices=["jsonrpc", "rest", "grpc"],
                   help="the binding to call: JSON-RPC, HTTP+JSON (REST, 1.0 only) or gRPC "
                        "(1.0 only; needs the [grpc] extra) (default: the first one the "
                        "agent card lists)")
    # Only a command that waits on a run (send; subscribe, a holder of it) hangs up on one:
    # get, list and cancel give up on a quick call, which ends no run.
    holds = ("(an interactive run is cancelled by the hang-up) " if timeout is None else "")
    p.add_argument("--timeout", type=seconds, default=timeout, metavar="SECONDS",
                   help="seconds the whole command may take; then the call is abandoned "
                        + holds + "and the exit status is "
                        "124" + ("" if timeout is not None else
                                 " (default: no limit; connecting and the card fetch still "
                                 f"give up after {CALL_TIMEOUT:g}s)"))
    g = p.add_argument_group("credentials and TLS")
    g.add_argument("--token", default=os.environ.get("SCOPED_A2A_TOKEN"),
                   help="send 'Authorization: Bearer TOKEN' (a JWT or an API key) "
                        "(default: $SCOPED_A2A_TOKEN)")
    g.add_argument("--api-key", default=os.environ.get("SCOPED_A2A_API_KEY"), metavar="KEY",
                   help="send 'X-API-Key: KEY' (default: $SCOPED_A2A_API_KEY)")
    g.add_argument("--cacert", metavar="FILE",
                   help="trust the CA certificates of this PEM file for https URLs (default: "
                        "the certifi bundle, or $SSL_CERT_FILE when set)")
    g.add_argument("--cert", metavar="FILE",
                   help="present this client certificate (PEM; mutual TLS)")
    g.add_argument("--key", metavar="FILE",
                   help="the private key of --cert, if the --cert file does not hold it")
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio",
                   help="the async library to run on")
    add_log_level(p, "WARNING")


def _http(args: argparse.Namespace) -> httpx.AsyncClient:
    """The httpx client of the TLS options; UsageError naming a file that cannot be used."""
    context = _tls_context(args)
    return httpx.AsyncClient(timeout=None, verify=context if context is not None else True)


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A TLS context of --cacert/--cert/--key (None: the default trust); a new one per call,
    as HTTP and gRPC each set their own ALPN on theirs. UsageError for a file that cannot be
    used."""
    if args.key and not args.cert:
        raise UsageError("--key needs --cert (the client certificate it belongs to)")
    if not (args.cacert or args.cert):
        return None
    try:
        if args.cacert:
            context = ssl.create_default_context(cafile=args.cacert)
        else:  # httpx's own default trust (certifi, or $SSL_CERT_FILE)
            context = httpx.create_ssl_context()
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot use --cacert {args.cacert}: {_os_reason(exc)}") from None
    if args.cert:
        try:
            context.load_cert_chain(args.cert, args.key)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"cannot use --cert {args.cert}" + (f" --key {args.key}" if args.key else "")
                + f": {_os_reason(exc)}") from None
    return context


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, ssl.SSLError):
        return f"not a usable PEM file ({exc.reason or exc})"
    return getattr(exc, "strerror", None) or str(exc)


def open_client(args: argparse.Namespace, http: httpx.AsyncClient) -> A2AClient:
    auth = (BearerToken(args.token) if args.token
            else ApiKey(args.api_key) if args.api_key else None)
    timeout = args.timeout if args.timeout is not None else CALL_TIMEOUT
    return A2AClient(args.url, http=http, version=args.a2a_version, timeout=timeout,
                     auth=auth, transport=args.transport, ssl_context=_tls_context(args))


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CardProblem(Exception):
    """Fetching the agent card failed with ``error``: the URL may not be an A2A agent."""

    def __init__(self, error: AgentHTTPError | InvalidAgentResponse) -> None:
        super().__init__(str(error))
        self.error = error


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (``from None`` included)."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(found) < 20:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _wrong_scheme(exc: BaseException, url: str) -> str | None:
    """The line for a URL whose scheme the agent does not serve, or None. An https:// URL to
    a plain-HTTP port fails the TLS handshake with WRONG_VERSION_NUMBER (the ssl error is in
    the chain on asyncio and trio alike); an http:// URL to a TLS port is dropped without an
    answer, which other failures can cause too, so that line says "if"."""
    scheme, _, rest = url.partition("://")
    causes = _causes(exc)
    if scheme == "https" and any(isinstance(e, ssl.SSLError) and e.reason ==
                                 "WRONG_VERSION_NUMBER" for e in causes):
        return f"cannot reach the agent at {url}: it does not speak TLS there; use http://{rest}"
    if scheme == "http" and any(isinstance(e, httpx.RemoteProtocolError) and
                                "without sending a response" in str(e) for e in causes):
        return (f"cannot reach the agent at {url}: it closed the connection without "
                f"answering; if it serves HTTPS, use https://{rest}")
    return None


def describe(exc: BaseException, url: str) -> tuple[str, int]:
    """A one-line message for a person, and the exit status, for a failed call."""
    where = card_url(url)
    card = isinstance(exc, CardProblem)
    if isinstance(exc, CardProblem):
        exc = exc.error
    if isinstance(exc, AgentTimeout):
        return f"the agent at {url} did not answer in time", EXIT_TIMEOUT
    if isinstance(exc, TransportError) and not isinstance(
            exc, (AgentUnreachable, AgentHTTPError)):
        return _one_line(str(exc), 300), EXIT_AGENT_ERROR
    if isinstance(exc, AgentUnreachable):
        text = str(exc)
        if any(isinstance(e, ssl.SSLCertVerificationError) for e in _causes(exc)):
            text = (f"cannot reach the agent at {url}: its TLS certificate is not trusted; "
                    "pass --cacert FILE with the CA that issued it")
        else:
            text = _wrong_scheme(exc, url) or text
        if url.rstrip("/") not in text:  # the card sent the call elsewhere: say so
            text += f" (the address the agent card at {where} gives)"
        return _one_line(text, 300), EXIT_AGENT_ERROR
    if isinstance(exc, AgentHTTPError):
        html = exc.detail.lstrip()[:1] == "<"
        if card:
            what = " with a web page" if html else ""
            return (f"{where} answered HTTP {exc.status_code}{what}, not an agent card: "
                    f"{url} is not an A2A agent (check the URL)"), EXIT_AGENT_ERROR
        detail = "a web page" if html else _one_line(exc.detail)
        return (f"the agent at {url} answered HTTP {exc.status_code}"
                + (f": {detail}" if detail else "")), EXIT_AGENT_ERROR
    if isinstance(exc, A2AError):
        if card and isinstance(exc, InvalidAgentResponse):
            if "is not an A2A agent" in exc.message:
                return exc.message, EXIT_AGENT_ERROR
            if "malformed" in exc.message or "not JSON" in exc.message:
                return (f"{where} answered, but not with JSON: {url} is not an A2A agent "
                        "(check the URL)"), EXIT_AGENT_ERROR
            return _one_line(f"{exc.message}; is {url} an A2A agent?", 300), EXIT_AGENT_ERROR
        if isinstance(exc, VersionNotSupported):
            return _one_line(f"{exc.message} (see --a2a-version and --transport)",
                             300), EXIT_AGENT_ERROR
        if isinstance(exc, (InvalidAgentResponse, Unauthenticated, PermissionDenied,
                            UnsupportedOperation)):
            return _one_line(exc.message, 300), EXIT_AGENT_ERROR
        if isinstance(exc, TaskNotFound):
            return (f"the agent has no task by that id (unknown, evicted, or another "
                    f"caller's): {_one_line(exc.message)}"), EXIT_AGENT_ERROR
        return f"the agent refused the call: {_one_line(exc.message, 300)}", EXIT_AGENT_ERROR
    raise exc


async def read_card(client: A2AClient) -> None:
    """Fetch the card first, so a card problem is worded as one (the URL is no A2A agent)."""
    try:
        card = await client.card()
    except CardSignatureError:
        raise
    except (AgentHTTPError, InvalidAgentResponse) as exc:
        raise CardProblem(exc) from None
    if not card.name and not card.supported_interfaces and not card.url:
        raise CardProblem(InvalidAgentResponse(
            f"{card_url(client.url)} answered JSON that is not an agent card (no name, no "
            f"interfaces): {client.url} is not an A2A agent (check the URL)"))


Body = Callable[[A2AClient, TextIO, TextIO], Awaitable[int]]


async def call_agent(
    args: argparse.Namespace, body: Body, out: TextIO, err: TextIO, *,
    aftermath: Callable[[], str | None] | None = None,
) -> int:
    """Run ``body`` with a client of ``args``, the whole of it bounded by ``--timeout`` and
    ended by Ctrl-C.

    A failure is written once to ``err`` and becomes the exit status; when the deadline passes
    (124) or Ctrl-C arrives (130) the body is cancelled (whatever it started is given up on by
    the abandon rule, inside it) and the client closed. ``aftermath`` then says, in the same
    line, what became of the task the body started.
    """
    if args.transport == "grpc" and not _protobuf_importable():
        err.write("error: --transport grpc needs protobuf: pip install 'scoped-a2a[grpc]'\n")
        return EXIT_USAGE
    try:
        http = _http(args)
    except UsageError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    interrupted = anyio.Event()
    async with http:
        with anyio.move_on_after(args.timeout) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_sigint, scope, interrupted)
                try:
                    async with open_client(args, http) as client:
                        await read_card(client)
                        return await body(client, out, err)
                except (TransportError, A2AError, CardProblem) as exc:
                    message, status = describe(exc, args.url)
                    err.write(f"error: {message}\n")
                    return status
                finally:
                    tg.cancel_scope.cancel()
    assert scope.cancelled_caught
    after = aftermath() if aftermath is not None else None
    if interrupted.is_set():
        err.write("interrupted: the call was abandoned" + (f"; {after}" if after else "") + "\n")
        return EXIT_INTERRUPTED
    err.write(f"error: no answer within --timeout {args.timeout:g}s; the call was abandoned"
              + (f"; {after}" if after else "") + "\n")
    return EXIT_TIMEOUT


def _protobuf_importable() -> bool:
    """Whether protobuf (the ``[grpc]`` extra) imports: ``--transport grpc`` needs it."""
    try:  # a probe, by name: the CLI does not import protobuf unless gRPC is used
        importlib.import_module("google.protobuf")
    except ImportError:
        return False
    return True


async def _cancel_on_sigint(scope: anyio.CancelScope, interrupted: anyio.Event) -> None:
    """On Ctrl-C, end the command as its deadline would (so what it started is given up on
    in order, not torn down by KeyboardInterrupt). A Ctrl-C seen before this handler was
    installed counts as one."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        if ctrl_c_seen():
            interrupted.set()
            scope.cancel()
            return
        async for _ in signals:
            interrupted.set()
            scope.cancel()
            return


def _broken_pipe(exc: BaseException) -> bool:
    if isinstance(exc, BrokenPipeError):
        return True
    return isinstance(exc, BaseExceptionGroup) and all(
        _broken_pipe(e) for e in exc.exceptions)


def run_client_command(fn: Callable[..., Awaitable[int]], args: argparse.Namespace) -> int:
    """``anyio.run`` a client command on ``--backend``; Ctrl-C is exit status 130 and one line
    (a KeyboardInterrupt, alone or in an exception group, when it lands before
    :func:`call_agent` watches for it). When the
    reader of stdout goes away (``... | head -1``) the command ends quietly with 141, the
    status of a process ended by SIGPIPE, as other command-line tools do."""
    try:
        python_sigint()
        return anyio.run(fn, args, sys.stdout, sys.stderr, backend=args.backend)
    except BaseException as exc:
        if interrupted(exc):  # before the call's own SIGINT watcher was installed
            sys.stderr.write("interrupted\n")
            return EXIT_INTERRUPTED
        if not _broken_pipe(exc):
            raise
        # Python flushes stdout again at exit: point it at /dev/null so that is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def parse_metadata(items: list[str]) -> dict[str, Any] | None:
    """``KEY=VALUE`` pairs as a dict; VALUE is JSON when it parses as JSON, else a string."""
    if not items:
        return None
    found: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--metadata takes KEY=VALUE, not {item!r}")
        try:
            found[key] = json.loads(value)
        except ValueError:
            found[key] = value
    return found
