"""How the client commands print A2A objects for a person: one line per event (no I/O)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from ..protocol.types import Task


def parts_text(obj: Any) -> str:
    """The text parts of a message or artifact (as JSON builtins), joined."""
    parts = obj.get("parts", []) if isinstance(obj, dict) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def state_name(state: Any) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required``."""
    return str(state or "?").removeprefix("TASK_STATE_").lower().replace("_", "-")


def task_line(task: Task) -> str:
    """``task ID STATE: REPLY``, the reply being the status message's text parts joined, or,
    when it has none (the a2a-sdk's agents answer in artifacts), the artifacts' (one line
    however many parts it has)."""
    said = task.status.message
    reply = "".join(p.text for p in said.parts if p.text) if said else ""
    if not reply:
        reply = "".join(p.text for a in task.artifacts or () for p in a.parts if p.text)
    reply = " ".join(reply.split())
    return f"task {task.id} {state_name(task.status.state)}" + (f": {reply}" if reply else "")


def human_line(kind: str, ev: Any) -> str:
    """One line for an event of ``kind`` (a StreamResponse member name, or ``trajectory``)."""
    if kind == "task":
        return f"task {ev.get('id')} {state_name(ev.get('status', {}).get('state'))}"
    if kind == "statusUpdate":
        status = ev.get("status", {})
        text = parts_text(status.get("message"))
        return f"[{state_name(status.get('state'))}]" + (f" {text}" if text else "")
    if kind == "artifactUpdate":
        art = ev.get("artifact", {})
        return f"[artifact {art.get('name') or art.get('artifactId')}] {parts_text(art)!r}"
    if kind == "trajectory":
        return f"[trajectory] {msgspec.json.encode(ev.get('data')).decode()}"
    if kind == "message":
        return f"[message] {parts_text(ev)}"
    return f"[{kind}] {msgspec.json.encode(ev).decode()}"
