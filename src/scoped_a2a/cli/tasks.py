"""``get``, ``list``, ``cancel`` and ``subscribe``: look at and act on an agent's tasks from the
command line, through :class:`~scoped_a2a.client.client.A2AClient` (GetTask, ListTasks, CancelTask,
SubscribeToTask; their 0.3 names where the agent speaks 0.3, which has no ListTasks).

Each takes the connection options of ``send`` (:mod:`.client_common`) and exits with the same
statuses: 0 done, 1 the task failed/was canceled/rejected (``get``, ``subscribe``), 2 bad command
line, 3 the agent is unreachable or refused the call (an unknown task, or another caller's, is
refused as not found), 124 ``--timeout`` passed, 130 Ctrl-C. ``--json`` prints the task (or the
ListTasks page) as one JSON object; ``subscribe --json`` one JSON line per event.

``subscribe`` prints each event with its position; after a broken stream, ``--last-event-id N``
resumes after position N. Its ``--timeout`` has no default (a task may run for long); leaving it
(Ctrl-C, ``--timeout``) only closes the stream, which never cancels the task by itself unless
the subscriber was its last caller waiting on an interactive run.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

import msgspec

from ..client.client import A2AClient
from ..protocol.errors import TaskNotCancelable
from ..protocol.types import Task, TaskState
from .arg_types import at_least_one, zero_or_more
from .client_common import (
    EXIT_NOT_CANCELED,
    EXIT_OK,
    EXIT_TASK_FAILED,
    add_client_options,
    call_agent,
    exit_status,
    http_url,
    run_client_command,
)
from .format import human_line, parts_text, state_name, task_line
from .help import HelpFormatter

_FAILED = (TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED)

STATE_NAMES = {s.name.lower().replace("_", "-"): s for s in TaskState
               if s is not TaskState.UNSPECIFIED}
"""``--state`` values: ``working``, ``input-required``, ... (the wire name works too)."""


def task_state(text: str) -> TaskState:
    """A task state from ``working``, ``input_required`` or ``TASK_STATE_WORKING``."""
    key = text.strip().lower().removeprefix("task_state_").replace("_", "-")
    if key not in STATE_NAMES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a task state; one of: {', '.join(STATE_NAMES)}")
    return STATE_NAMES[key]


def _dump(out: TextIO, obj: Any) -> None:
    out.write(msgspec.json.encode(msgspec.to_builtins(obj)).decode() + "\n")
    out.flush()


def _task_status(task: Task) -> int:
    """1 for a task that failed, was canceled or rejected (its line says so), else 0."""
    return EXIT_TASK_FAILED if task.status.state in _FAILED else EXIT_OK


def _add(sub: Any, name: str, summary: str, description: str, ok: str,
         task: bool = True, extra: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=description, formatter_class=HelpFormatter,
        epilog=exit_status(ok, task=task, extra=extra))
    p.add_argument("url", type=http_url,
                   help="the agent's base URL (where its agent card is served)")
    return p


def add_task_commands(sub: Any) -> None:
    """Add ``get``, ``list``, ``cancel`` and ``subscribe`` to the CLI's subparsers."""
    g = _add(sub, "get", "print one task (GetTask)",
             "Print one task of the agent: its state, the status message and its artifacts "
             "(--json: the whole task).", "the task was found and has not failed")
    g.add_argument("task_id", metavar="TASK_ID", help="the task's id")
    g.add_argument("--history-length", type=zero_or_more, metavar="N",
                   help="include at most N messages of the task's history (0: none) "
                        "(default: the agent's choice)")
    add_client_options(g)

    ls = _add(sub, "list", "list tasks, newest first (ListTasks, A2A 1.0)",
              "List the agent's tasks you may see, newest first, one page at a time (ListTasks; "
              "an agent that speaks only A2A 0.3 has no such method). The next page's token is "
              "printed on stderr (--json: in the page).", "the page was listed", task=False)
    ls.add_argument("--context", metavar="CONTEXT_ID",
                    help="only the tasks of this conversation (context)")
    ls.add_argument("--state", type=task_state, metavar="STATE",
                    help="only tasks in this state: " + ", ".join(STATE_NAMES))
    ls.add_argument("--page-size", type=at_least_one, metavar="N",
                    help="at most N tasks on the page (default: the agent's page size)")
    ls.add_argument("--page-token", metavar="TOKEN",
                    help="the page after the one that printed this token")
    ls.add_argument("--history-length", type=zero_or_more, metavar="N",
                    help="include at most N messages of each task's history")
    ls.add_argument("--include-artifacts", action="store_true",
                    help="include each task's artifacts (--json)")
    add_client_options(ls)

    c = _add(sub, "cancel", "cancel a task (CancelTask)",
             "Cancel a task of the agent and print it. Exit status 0 only when the task ended "
             "canceled; 4 when it had already ended otherwise, or the agent still shows it "
             "running after the cancel.", "the task is canceled", task=False,
             extra=("  4    the task is not canceled: it had already ended otherwise, or the "
                    "agent still shows it running",))
    c.add_argument("task_id", metavar="TASK_ID", help="the task's id")
    add_client_options(c)

    s = _add(sub, "subscribe", "print a task's events as they happen (SubscribeToTask)",
             "Print a task's events until it ends or needs input, each with its position "
             "(--json: one JSON line per event). After a broken stream, --last-event-id N "
             "resumes after position N.",
             "the stream ended and the task did not fail")
    s.add_argument("task_id", metavar="TASK_ID", help="the task's id")
    s.add_argument("--last-event-id", type=zero_or_more, metavar="N",
                   help="resume after the event at position N (the agent keeps positions)")
    add_client_options(s, timeout=None)


async def _get(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async def body(client: A2AClient, out: TextIO, err: TextIO) -> int:
        task = await client.get_task(args.task_id, history_length=args.history_length)
        if args.json:
            _dump(out, task)
        else:
            out.write(task_line(task) + "\n")
            out.write(f"  context {task.context_id}\n")
            for art in task.artifacts or ():
                text = parts_text(msgspec.to_builtins(art))
                out.write(f"  [artifact {art.name or art.artifact_id}] {text!r}\n")
        return _task_status(task)

    return await call_agent(args, body, out, err)


async def _list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async def body(client: A2AClient, out: TextIO, err: TextIO) -> int:
        page = await client.list_tasks(
            context_id=args.context, status=args.state, page_size=args.page_size,
            page_token=args.page_token, history_length=args.history_length,
            include_artifacts=args.include_artifacts)
        if args.json:
            _dump(out, page)
            return EXIT_OK
        for task in page.tasks:
            out.write(f"{task.id}  {state_name(task.status.state):<14}  {task.context_id}\n")
        if page.next_page_token:
            err.write(f"more: --page-token {page.next_page_token}\n")
        return EXIT_OK

    return await call_agent(args, body, out, err)


async def _cancel(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async def body(client: A2AClient, out: TextIO, err: TextIO) -> int:
        try:
            task = await client.cancel(args.task_id)
        except TaskNotCancelable:
            task = await client.get_task(args.task_id)  # ended: how?
        if args.json:
            _dump(out, task)
        else:
            out.write(task_line(task) + "\n")
        state = task.status.state
        if state is TaskState.CANCELED:
            return EXIT_OK
        err.write(f"error: task {task.id} is {state_name(state)}, not canceled"
                  + (" (it had already ended)" if state.terminal else
                     " (the agent accepted the cancel but has not ended it)") + "\n")
        return EXIT_NOT_CANCELED

    return await call_agent(args, body, out, err)


async def _subscribe(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async def body(client: A2AClient, out: TextIO, err: TextIO) -> int:
        state: TaskState | None = None
        task_id = args.task_id
        async with client.subscribe(task_id, last_event_id=args.last_event_id) as events:
            async for item in events:
                event = item.event
                found = getattr(event, "status", None)
                if found is not None:
                    state = found.state
                if args.json:
                    line = {"source": "stream", "position": item.position, "kind": item.kind,
                            "event": msgspec.to_builtins(event)}
                    out.write(msgspec.json.encode(line).decode() + "\n")
                else:
                    where = "" if item.position is None else f"{item.position} "
                    out.write(where + human_line(item.kind, msgspec.to_builtins(event)) + "\n")
                out.flush()
        return EXIT_TASK_FAILED if state in _FAILED else EXIT_OK

    return await call_agent(args, body, out, err)


COMMANDS = {"get": _get, "list": _list, "cancel": _cancel, "subscribe": _subscribe}


def run_task_command(args: argparse.Namespace) -> int:
    """Run ``get``, ``list``, ``cancel`` or ``subscribe``; returns the exit status."""
    return run_client_command(COMMANDS[args.command], args)


__all__ = ["add_task_commands", "run_task_command"]
