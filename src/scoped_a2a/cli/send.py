"""``python -m scoped_a2a send URL TEXT``: one turn with an agent, from the command line.

The message is sent as a one-turn :class:`~scoped_a2a.client.step.Step`. Output, as the events
arrive:

- by default, the task's final state and reply;
- ``--stream``: every event of the turn's stream, then the result;
- ``--follow``: every event of the task's live trajectory (the agent's own tool and model calls
  included), then the result;
- ``--out DIR``: the trajectory is also written to DIR (see :mod:`scoped_a2a.client.sinks` for
  the layout), and the file parts of the answer to DIR/files
  (:mod:`scoped_a2a.client.saved_files`: names made safe); a DIR that already holds a step's
  trajectories is refused before anything is sent.

Human-readable lines by default; ``--json`` prints one JSON object per line instead
(``{"source", "position", "kind", "event"}``, the last with source ``result``).

``--transport rest|jsonrpc`` forces the binding (HTTP+JSON is 1.0 only); by default the agent
card's order decides.

A task that needs input is answered by a second ``send`` with ``--task-id`` (and
``--context-id``): the first one prints that command. A failure is said once, on stderr.
``--timeout`` bounds the whole turn: when it passes (124), or on Ctrl-C (130), the turn is given
up on by the abandon rule (:mod:`scoped_a2a.client.abandon`): the task is cancelled unless its
run is detached, and the error line names the task and says which (:mod:`.client_common` has
the options and statuses every client command shares). A connection lost mid-turn is one line
too (status 3), naming the task and the commands that read it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec

from ..client.client import A2AClient, user_message
from ..client.errors import TransportError
from ..client.pages import LivePage, PageSink
from ..client.saved_files import save_files
from ..client.sinks import DirectorySink, MemorySink, StepSink
from ..client.step import Step
from ..client.wire import StreamEvent
from ..protocol.types import Message, Task, TaskState
from .client_common import (
    EXIT_AGENT_ERROR,
    EXIT_OK,
    EXIT_TASK_FAILED,
    EXIT_USAGE,
    UsageError,
    add_client_options,
    call_agent,
    exit_status,
    http_url,
    parse_metadata,
    run_client_command,
)
from .format import human_line, task_line
from .help import HelpFormatter, prog_name

SEND_DESCRIPTION = """\
Send one message to an A2A agent and print the task as it runs: by default its final state and
reply; --stream: every event of the turn's stream; --follow: every event of the task's live
trajectory (the agent's own tool and model calls too). --json prints JSON lines instead."""

SEND_EPILOG = exit_status(
    ok="the task completed, needs input, or the agent replied with a message",
    usage=", or --out DIR already holds a trajectory",
) + """

A task that needs input prints the command that answers it:
  send URL TEXT --task-id ID --context-id CONTEXT"""


def add_send_parser(sub: Any) -> None:
    """Add the ``send`` subcommand to the CLI's subparsers."""
    s = sub.add_parser(
        "send", help="send one message to an A2A agent and print the task as it runs",
        description=SEND_DESCRIPTION, epilog=SEND_EPILOG, formatter_class=HelpFormatter)
    s.add_argument("url", type=http_url,
                   help="the agent's base URL (where its agent card is served)")
    s.add_argument("text", help="the message text")
    s.add_argument("--stream", action="store_true", help="print the turn's stream events live")
    s.add_argument("--follow", action="store_true",
                   help="print the task's live trajectory (the agent's own events too); "
                        "includes what --stream prints, so the two are not combined")
    s.add_argument("--out", metavar="DIR",
                   help="write the trajectory to DIR, a new or empty folder, and the files "
                        "the agent answers with to DIR/files (their names made safe)")
    s.add_argument("--task-id", metavar="ID",
                   help="continue this task (one that needs input) with the message")
    s.add_argument("--context-id", metavar="CONTEXT",
                   help="the conversation (context) the message belongs to")
    s.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE",
                   help="put KEY in the message's metadata (repeatable); VALUE is JSON when it "
                        "parses as JSON, else a string. E.g. onDisconnect=continue, the key "
                        "of a serve --detach-metadata rule, or a deadline for the run: "
                        "https://github.com/scoped-a2a/scoped-a2a/ext/deadline/v1/budgetMs=MS "
                        "(the full key: a bare budgetMs sets no deadline)")
    add_client_options(s, timeout=None)  # a turn may last long: no limit unless asked


class _Printer:
    """Prints events; once stdout's reader has gone, prints nothing more and cancels
    ``scope`` (the turn), since nobody reads what it would print."""

    def __init__(self, out: TextIO, as_json: bool, scope: anyio.CancelScope) -> None:
        self.out = out
        self.json = as_json
        self.scope = scope
        self.broken = False
        self.names: dict[str, str] = {}  # artifact names by id: later chunks may omit them

    def emit(self, source: str, position: int | None, kind: str, event: Any) -> None:
        if self.broken:
            return
        try:
            if self.json:
                line = msgspec.json.encode(
                    {"source": source, "position": position, "kind": kind, "event": event})
                self.out.write(line.decode() + "\n")
            else:
                self.out.write(human_line(kind, event, self.names) + "\n")
            self.out.flush()
        except BrokenPipeError:
            # Raised in a follower it would only be logged: end the turn from here instead.
            self.broken = True
            self.scope.cancel()


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
    try:
        metadata = parse_metadata(args.metadata)
        inner: StepSink = DirectorySink(args.out) if args.out else MemorySink()
    except (FileExistsError, UsageError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    message = user_message(args.text, task_id=args.task_id, context_id=args.context_id,
                           metadata=metadata)

    steps: list[Step] = []

    async def body(client: A2AClient, out: TextIO, err: TextIO) -> int:
        return await _turn(args, client, message, inner, out, err, steps)

    return await call_agent(args, body, out, err,
                            aftermath=lambda: _aftermath(args, steps))


def _aftermath(args: argparse.Namespace, steps: list[Step]) -> str | None:
    """What became of the turn's task once the command gave it up (timeout, Ctrl-C)."""
    turn = steps[0].turns[-1] if steps and steps[0].turns else None
    if turn is None or turn.task_id is None:
        return "no task had been started yet" if steps else None
    if turn.abandoned is None:  # it had settled, or the rule is off
        return f"task {turn.task_id}: see it with {_reads(args, turn.task_id)}"
    text = str(turn.abandoned)
    if turn.abandoned.outcome in ("detached", "refused", "timed-out", "requested"):
        text += f"; see it with {_reads(args, turn.task_id)}"
    return text


def _reads(args: argparse.Namespace, task_id: str) -> str:
    """The commands that read a task: ``get URL ID`` or ``subscribe URL ID``."""
    words = [shlex.quote(args.url), task_id]
    for flag, value in (("--transport", args.transport), ("--a2a-version", args.a2a_version)):
        if value:
            words += [flag, value]
    rest = " ".join(words)
    return f"'{prog_name()} get {rest}' or '{prog_name()} subscribe {rest}'"


async def _turn(args: argparse.Namespace, client: A2AClient, message: Message, inner: StepSink,
                out: TextIO, err: TextIO, steps: list[Step]) -> int:
    """One turn with the agent; prints what ``args`` asks for; returns the exit status."""
    scope = anyio.CancelScope()
    printer = _Printer(out, args.json, scope)
    sink: StepSink = _PrintingSink(printer, inner) if args.follow else inner
    follow = bool(args.follow or args.out)
    streamed_message = False

    def on_event(item: StreamEvent) -> None:
        nonlocal streamed_message
        if args.stream:
            streamed_message = streamed_message or item.kind == "message"
            printer.emit("stream", item.position, item.kind, msgspec.to_builtins(item.event))

    step = Step(client, sink=sink, follow=follow)
    steps.append(step)
    try:
        with scope:
            async with step:
                result = await step.turn(message, on_event=on_event)
    except TransportError as exc:
        turn = step.turns[-1] if step.turns else None
        if turn is None or turn.task_id is None:
            raise  # no task yet: worded as any other transport failure
        line = f"error: lost the agent at {args.url} during task {turn.task_id}: {exc}"
        if turn.abandoned is not None and turn.abandoned.outcome != "refused":
            line += f"; {turn.abandoned}"
        err.write(" ".join(line.split()) + f"; see it with {_reads(args, turn.task_id)}\n")
        return EXIT_AGENT_ERROR
    if printer.broken:
        raise BrokenPipeError("stdout's reader has gone")  # exit status 141
    failed = isinstance(result, Task) and result.status.state in (
        TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED)
    kind = "task" if isinstance(result, Task) else "message"
    if args.json:
        printer.emit("result", None, kind, msgspec.to_builtins(result))
    elif isinstance(result, Message):
        if not streamed_message:  # --stream has printed the reply already
            printer.emit("result", None, "message", msgspec.to_builtins(result))
    elif not failed:  # a failure is said once, on stderr (below)
        out.write(task_line(result) + "\n")
        if result.status.state.interrupted:
            err.write(f"answer with: {answer_command(args, result)}\n")
    if args.out:
        for path in await save_files(result, Path(args.out) / "files"):
            if args.json:
                printer.emit("file", None, "file", {"path": str(path)})
            else:
                out.write(f"saved {path}\n")
    if isinstance(result, Task) and failed:
        err.write(f"error: {task_line(result)}\n")
        return EXIT_TASK_FAILED
    return EXIT_OK


def answer_command(args: argparse.Namespace, task: Task) -> str:
    """The command line that answers ``task`` (it needs input), ready to run but for TEXT."""
    words = [prog_name(), "send", shlex.quote(args.url), "'YOUR ANSWER'", "--task-id", task.id,
             "--context-id", task.context_id]
    for flag, value in (("--transport", args.transport), ("--a2a-version", args.a2a_version)):
        if value:
            words += [flag, value]
    return " ".join(words)


def _out_problem(out: str) -> str | None:
    """Why the folder ``--out`` names cannot take a trajectory (it is created if missing)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        return f"--out {out} is a file, not a folder"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write the trajectory to --out {out}: {exc.strerror or exc}"
    return None


def run_send(args: argparse.Namespace) -> int:
    """Run ``send``; returns the exit status. A folder ``--out`` cannot be written to is said
    before anything is sent (not after the turn, as a traceback)."""
    problem = _out_problem(args.out) if args.out else None
    if problem is not None:
        sys.stderr.write(f"error: {problem}\n")
        return EXIT_USAGE
    return run_client_command(_send, args)
