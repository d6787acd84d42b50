"""a2a-sdk 0.3 executors written the way its docs write them (pydantic types), for the tests.

Each is an unchanged ``AgentExecutor`` of the 0.3 generation: it knows nothing of scoped-a2a.
``Journal`` records what the framework did to them (which task ran, whether ``cancel`` was
called) so tests can check it.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import FilePart, FileWithBytes, Part, TaskState, TextPart
from a2a.utils import new_agent_text_message, new_task


@dataclass
class Journal:
    started: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    cancel_saw_task: list[bool] = field(default_factory=list)
    execute_cancelled: list[str] = field(default_factory=list)
    users: list[tuple[bool, str]] = field(default_factory=list)
    related: list[list[str]] = field(default_factory=list)
    running: asyncio.Event | None = None

    def mark_running(self) -> None:
        if self.running is not None:
            self.running.set()


def text(value: str) -> Part:
    return Part(root=TextPart(text=value))


class EchoExecutor(AgentExecutor):
    """Message mode: one direct reply."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(
            new_agent_text_message(f"echo: {context.get_user_input()}", context.context_id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


class StreamingExecutor(AgentExecutor):
    """Task mode through TaskUpdater: working, artifact chunks, a file, then completed.

    ``slow``: seconds between chunks (a run in flight to hang up on). Texts: ``ask`` asks for
    input first and echoes the answer; ``reject`` rejects the task.
    """

    def __init__(self, journal: Journal | None = None, *, slow: float = 0.0) -> None:
        self.journal = journal or Journal()
        self.slow = slow

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        self.journal.started.append(task.id)
        assert context.call_context is not None
        user = context.call_context.user
        self.journal.users.append((user.is_authenticated, user.user_name))
        self.journal.related.append([t.id for t in context.related_tasks])
        said = context.get_user_input()
        if said == "reject":
            await updater.reject(updater.new_agent_message([text("not my job")]))
            return
        if said == "ask" and task.status.state != TaskState.input_required:
            await updater.requires_input(updater.new_agent_message([text("which?")]))
            return
        await updater.start_work()
        self.journal.mark_running()
        words = f"you said {said}".split()
        try:
            for i, word in enumerate(words):
                if self.slow:
                    await asyncio.sleep(self.slow)
                await updater.add_artifact(
                    [text(word + (" " if i < len(words) - 1 else ""))], artifact_id="reply",
                    name="reply", append=i > 0, last_chunk=i == len(words) - 1)
        except asyncio.CancelledError:
            self.journal.execute_cancelled.append(task.id)
            raise
        raw = base64.b64encode(b"\x00\x01binary").decode()
        await updater.add_artifact([Part(root=FilePart(file=FileWithBytes(
            bytes=raw, mime_type="application/octet-stream", name="data.bin")))], name="file")
        await updater.complete(updater.new_agent_message([text("done")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.journal.cancelled.append(context.task_id or "")
        self.journal.cancel_saw_task.append(context.current_task is not None)
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()  # what a2a-sdk asks of cancel(): enqueue the task's canceled


class RaisingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise RuntimeError("secret database password in this message")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        pass


class StatusBeforeTaskExecutor(AgentExecutor):
    """Breaks a rule: a status update for a new task before its Task."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.start_work(updater.new_agent_message([text("starting")]))
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        pass
