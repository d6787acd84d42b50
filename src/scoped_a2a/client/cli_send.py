"""``python -m scoped_a2a send URL TEXT``: one turn with an agent, from the command line.

The message is sent as a one-turn :class:`~.step.Step`. Output, as the events arrive:

- by default, the task's final state and reply;
- ``--stream``: every event of the turn's stream, then the result;
- ``--follow``: every event of the task's live trajectory (the agent's own tool and model calls
  included), then the result;
- ``--out DIR``: the trajectory is also written to DIR (see :mod:`.sinks` for the layout); a DIR
  that already holds a step's trajectories is refused before anything is sent.

Human-readable lines by default; ``--json`` prints one JSON object per line instead
(``{"source", "position", "kind", "event"}``, the last with source ``result``).

``--transport rest|jsonrpc`` forces the binding (HTTP+JSON is 1.0 only); by default the agent
card's order decides.

A task that needs input is answered by a second ``send`` with ``--task-id`` (and
``--context-id``), which the first one prints.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

import anyio
import msgspec

from ..cli_help import HelpFormatter, add_log_level
from ..protocol.errors import A2AError
from ..protocol.types import Message, Task, TaskState
from .auth import ApiKey, BearerToken
from .client import A2AClient, user_message
from .errors import TransportError
from .pages import LivePage, PageSink
from .sinks import DirectorySink, MemorySink, StepSink
from .step import Step
from .wire import StreamEvent

EXIT_TASK_FAILED = 1
EXIT_USAGE = 2
EXIT_AGENT_ERROR = 3

SEND_DESCRIPTION = """\
Send one message to an A2A agent and print the task as it runs: by default its final state and
reply; --stream: every event of the turn's stream; --follow: every event of the task's live
trajectory (the agent's own tool and model calls too). --json prints JSON lines instead."""

SEND_EPILOG = """\
exit status:
  0    the task completed, needs input, or the agent replied with a message
  1    the task failed, was canceled or was rejected
  2    bad command line (also: --out DIR already holds a trajectory)
  3    the agent is unreachable or answered with an error
  130  interrupted (Ctrl-C)

A task that needs input prints its ids; answer it with
  send URL TEXT --task-id ID --context-id CONTEXT"""


def add_send_parser(sub: Any) -> None:
    """Add the ``send`` subcommand to the CLI's subparsers."""
    s = sub.add_parser(
        "send", help="send one message to an A2A agent and print the task as it runs",
        description=SEND_DESCRIPTION, epilog=SEND_EPILOG, formatter_class=HelpFormatter)
    s.add_argument("url", help="the agent's base URL (where its agent card is served)")
    s.add_argument("text", help="the message text")
    s.add_argument("--stream", action="store_true", help="print the turn's stream events live")
    s.add_argument("--follow", action="store_true",
                   help="print the task's live trajectory (the agent's own events too); "
                        "includes what --stream prints, so the two are not combined")
    s.add_argument("--out", metavar="DIR",
                   help="write the trajectory to DIR, a new or empty folder")
    s.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    s.add_argument("--task-id", metavar="ID",
                   help="continue this task (one that needs input) with the message")
    s.add_argument("--context-id", metavar="CONTEXT",
                   help="the conversation (context) the message belongs to")
    s.add_argument("--a2a-version", choices=["1.0", "0.3"],
                   help="protocol version to speak (default: the card's choice)")
    s.add_argument("--transport", choices=["jsonrpc", "rest"],
                   help="the binding to call: JSON-RPC or HTTP+JSON (REST, 1.0 only) "
                        "(default: the first one the agent card lists)")
    s.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for the agent to answer a call")
    s.add_argument("--token", default=os.environ.get("SCOPED_A2A_TOKEN"),
                   help="send 'Authorization: Bearer TOKEN' (a JWT or an API key) "
                        "(default: $SCOPED_A2A_TOKEN)")
    s.add_argument("--api-key", default=os.environ.get("SCOPED_A2A_API_KEY"), metavar="KEY",
                   help="send 'X-API-Key: KEY' (default: $SCOPED_A2A_API_KEY)")
    s.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio",
                   help="the async library to run on")
    add_log_level(s, "WARNING")


class _Printer:
    def __init__(self, out: TextIO, as_json: bool) -> None:
        self.out = out
        self.json = as_json

    def emit(self, source: str, position: int | None, kind: str, event: Any) -> None:
        if self.json:
            line = msgspec.json.encode(
                {"source": source, "position": position, "kind": kind, "event": event})
            self.out.write(line.decode() + "\n")
        else:
            self.out.write(_human(kind, event) + "\n")
        self.out.flush()


def _text(obj: Any) -> str:
    parts = obj.get("parts", []) if isinstance(obj, dict) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _state(state: Any) -> str:
    return str(state or "?").removeprefix("TASK_STATE_").lower().replace("_", "-")


def _human(kind: str, ev: Any) -> str:
    if kind == "task":
        return f"task {ev.get('id')} {_state(ev.get('status', {}).get('state'))}"
    if kind == "statusUpdate":
        status = ev.get("status", {})
        text = _text(status.get("message"))
        return f"[{_state(status.get('state'))}]" + (f" {text}" if text else "")
    if kind == "artifactUpdate":
        art = ev.get("artifact", {})
        return f"[artifact {art.get('name') or art.get('artifactId')}] {_text(art)!r}"
    if kind == "trajectory":
        return f"[trajectory] {msgspec.json.encode(ev.get('data')).decode()}"
    if kind == "message":
        return f"[message] {_text(ev)}"
    return f"[{kind}] {msgspec.json.encode(ev).decode()}"


class _PrintingSink:
    """A step sink that prints each page's events, then hands everything to ``inner``."""

    def __init__(self, printer: _Printer, inner: StepSink) -> None:
        self.printer = printer
        self.inner = inner

    async def link(self, previous: str | None, turn: str | None) -> None:
        await self.inner.link(previous, turn)

    async def meta(self, turn: str, meta: dict[str, Any]) -> None:
        await self.inner.meta(turn, meta)

    def pages(self, turn: str) -> PageSink:
        inner = self.inner.pages(turn)

        async def sink(page: LivePage) -> None:
            for e in page.events:
                self.printer.emit("trajectory", e.position, e.kind, e.event)
            await inner(page)

        return sink

    async def end(self, turn: str, state: TaskState | None, next: int) -> None:
        await self.inner.end(turn, state, next)


async def _send(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.stream and args.follow:
        err.write("error: --follow already prints every stream event (and the agent's own); "
                  "use one of --stream and --follow\n")
        return EXIT_USAGE
    if args.transport == "rest" and args.a2a_version == "0.3":
        err.write("error: the HTTP+JSON (REST) binding is A2A 1.0 only; use --transport "
                  "jsonrpc with --a2a-version 0.3\n")
        return EXIT_USAGE
    printer = _Printer(out, args.json)
    try:
        inner: StepSink = DirectorySink(args.out) if args.out else MemorySink()
    except FileExistsError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    sink: StepSink = _PrintingSink(printer, inner) if args.follow else inner
    follow = bool(args.follow or args.out)
    streamed_message = False

    def on_event(item: StreamEvent) -> None:
        nonlocal streamed_message
        if args.stream:
            streamed_message = streamed_message or item.kind == "message"
            printer.emit("stream", item.position, item.kind, msgspec.to_builtins(item.event))

    message = user_message(args.text, task_id=args.task_id, context_id=args.context_id)
    try:
        auth = (BearerToken(args.token) if args.token
                else ApiKey(args.api_key) if args.api_key else None)
        client = A2AClient(args.url, version=args.a2a_version, timeout=args.timeout,
                           auth=auth, transport=args.transport)
        async with client, Step(client, sink=sink, follow=follow) as step:
            result = await step.turn(message, on_event=on_event)
    except TransportError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_AGENT_ERROR
    except A2AError as exc:
        err.write(f"error: the agent answered {exc.code}: {exc.message}\n")
        return EXIT_AGENT_ERROR
    kind = "task" if isinstance(result, Task) else "message"
    if args.json:
        printer.emit("result", None, kind, msgspec.to_builtins(result))
    elif isinstance(result, Message):
        if not streamed_message:  # --stream has printed the reply already
            printer.emit("result", None, "message", msgspec.to_builtins(result))
    else:
        reply = _text(msgspec.to_builtins(result.status.message)) if result.status.message else ""
        out.write(f"task {result.id} {_state(result.status.state)}"
                  + (f": {reply}" if reply else "") + "\n")
        if result.status.state.interrupted:
            err.write(f"answer with: send {args.url} TEXT --task-id {result.id} "
                      f"--context-id {result.context_id}\n")
    if isinstance(result, Task) and result.status.state in (
        TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED
    ):
        reply = result.status.message.text if result.status.message else ""
        err.write(f"error: task {result.id} {_state(result.status.state)}"
                  + (f": {reply}" if reply else "") + "\n")
        return EXIT_TASK_FAILED
    return 0


def run_send(args: argparse.Namespace) -> int:
    """Run ``send``; returns the exit status."""
    try:
        return anyio.run(_send, args, sys.stdout, sys.stderr, backend=args.backend)
    except KeyboardInterrupt:
        return 130
