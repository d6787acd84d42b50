"""One task's timeline: its log (from the task store, as the A2A methods read it) interleaved
with the console's marks (holders coming and going, the run's start and end), streamed live.

Items are JSON objects with a ``kind``: ``created`` (the message that started the task),
``status``, ``artifact``, ``trajectory``, ``holder``, ``run``; log items carry their log
``position``. Text is plain text (message and artifact text parts joined; other parts named
in brackets); the page shows it with ``textContent`` only.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio

from ...protocol.errors import TaskNotFound
from ...protocol.trajectory import LogEvent, TrajectoryEvent
from ...protocol.types import Message, Part, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from ...store.base import TaskStore
from .http import EventStream
from .hub import Mark, RunHub, state_name

MAX_TEXT = 4000
"""Characters of one item's text sent to the page (the rest is cut, and says so)."""

KEEPALIVE = 15.0


def parts_text(parts: list[Part]) -> str:
    out: list[str] = []
    for part in parts:
        if part.text is not None:
            out.append(part.text)
        elif part.url is not None or part.raw is not None:
            out.append(f"[file {part.filename or part.media_type or ''}]".replace(" ]", "]"))
        elif part.data is not None:
            out.append(_json(part.data))
    return _cut("\n".join(out))


def message_text(message: Message | None) -> str | None:
    return None if message is None else parts_text(message.parts)


def log_item(position: int, event: LogEvent) -> dict[str, Any]:
    """The timeline item of one log event."""
    if isinstance(event, TaskStatusUpdateEvent):
        status = event.status
        item: dict[str, Any] = {"kind": "status", "state": state_name(status.state),
                                "text": message_text(status.message)}
        meta = event.metadata or {}
        if "reason" in meta:
            item["reason"] = str(meta["reason"])
        if "canceledBy" in meta:
            item["canceledBy"] = str(meta["canceledBy"])
        at = status.timestamp
    elif isinstance(event, TaskArtifactUpdateEvent):
        art = event.artifact
        item = {"kind": "artifact", "name": art.name or art.artifact_id,
                "text": parts_text(art.parts), "append": event.append}
        at = None
    else:
        assert isinstance(event, TrajectoryEvent)
        item = {"kind": "trajectory", "text": _cut(_json(event.data))}
        at = event.timestamp
    item["position"] = position
    if at is not None:
        item["time"] = at
    return item


def mark_item(mark: Mark) -> dict[str, Any]:
    return mark.to_json()


async def stream_timeline(out: EventStream, store: TaskStore, hub: RunHub, task_id: str) -> None:
    """Write ``task_id``'s timeline to ``out``: ``reset``, then ``item`` events as they happen,
    and ``end`` once the task has ended and its run's last mark is written.

    The caller has checked the viewer may see the task. Raises TaskNotFound when the task is
    evicted meanwhile (after ``reset``, the stream just ends). Cancellation (a hang-up) ends it.
    """
    task, _ = await store.get(task_id)
    await out.event("reset", {"taskId": task_id})
    if task.history:
        first = task.history[0]
        await out.event("item", {"kind": "created", "role": first.role.value,
                                 "text": message_text(first), "position": 0})
    cursor, mark_seq = 0, 0

    async def marks_up_to(position: float) -> None:
        nonlocal mark_seq
        found = hub.view(task_id)
        if found is None:
            return
        for mark in list(found[1].marks):
            if mark.seq > mark_seq and mark.after <= position:
                await out.event("item", mark_item(mark))
                mark_seq = mark.seq

    while True:
        try:
            page = await store.read(task_id, cursor, max_events=200)
        except TaskNotFound:
            return
        for entry in page.entries:
            await marks_up_to(entry.position - 1)
            await out.event("item", log_item(entry.position, entry.event))
        if page.entries:
            cursor = page.next
        if page.has_more:
            continue
        await marks_up_to(cursor)
        found = hub.view(task_id)
        live = found is not None and found[0] is not None
        if page.task.status.state.terminal and not live:
            await marks_up_to(float("inf"))
            await out.event("end", {"taskId": task_id,
                                    "state": state_name(page.task.status.state)})
            return
        if hub.closed and not live:  # shutting down, and nothing more will come from here
            return
        with anyio.move_on_after(KEEPALIVE) as idle:
            await _first_of(partial(store.wait, task_id, cursor),
                            partial(hub.wait_task, task_id))
        if idle.cancelled_caught:
            await out.keepalive()


async def _first_of(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as one of ``waits`` returns (the others are cancelled)."""
    async with anyio.create_task_group() as tg:
        async def one(wait: Callable[[], Awaitable[object]]) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(one, wait)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"... ({len(text) - MAX_TEXT} more characters)"
