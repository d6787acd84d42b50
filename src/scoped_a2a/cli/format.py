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


def artifact_line(ev: Any, names: dict[str, str] | None = None) -> str:
    """``[artifact LABEL] 'text'`` for an artifact update. LABEL is the artifact's name, also
    on the chunks after the first when ``names`` (a dict kept across one stream's lines)
    remembers it (ADK names only the first chunk), else its id. A chunk without text says what
    it is (``(end)`` for an empty last chunk) instead of printing ``''``."""
    art = ev.get("artifact", {}) if isinstance(ev, dict) else {}
    art_id = str(art.get("artifactId") or "?")
    if art.get("name") and names is not None:
        names[art_id] = str(art["name"])
    label = art.get("name") or (names or {}).get(art_id) or art_id
    text = parts_text(art)
    if text:
        return f"[artifact {label}] {text!r}"
    others = [p for p in art.get("parts", []) if isinstance(p, dict) and not p.get("text")]
    if any(("data" in p or "raw" in p or "url" in p) for p in others):
        return f"[artifact {label}] ({len(others)} non-text part(s))"
    return f"[artifact {label}] " + ("(end)" if ev.get("lastChunk") else "(no text)")


def human_line(kind: str, ev: Any, names: dict[str, str] | None = None) -> str:
    """One line for an event of ``kind`` (a StreamResponse member name, or ``trajectory``);
    ``names``: artifact names by id, kept across one stream's lines (:func:`artifact_line`)."""
    if kind == "task":
        return f"task {ev.get('id')} {state_name(ev.get('status', {}).get('state'))}"
    if kind == "statusUpdate":
        status = ev.get("status", {})
        text = parts_text(status.get("message"))
        return f"[{state_name(status.get('state'))}]" + (f" {text}" if text else "")
    if kind == "artifactUpdate":
        return artifact_line(ev, names)
    if kind == "trajectory":
        return f"[trajectory] {msgspec.json.encode(ev.get('data')).decode()}"
    if kind == "message":
        return f"[message] {parts_text(ev)}"
    return f"[{kind}] {msgspec.json.encode(ev).decode()}"
