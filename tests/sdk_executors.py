"""a2a-sdk 1.x executors written the way its docs write them, for the adapter's tests.

Each is an unchanged ``AgentExecutor``: it knows nothing of scoped-a2a. ``Journal`` records what
the framework did to them (which task ran, whether ``cancel`` was called) so tests can check it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from a2a.helpers.proto_helpers import (
    new_raw_part,
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb


@dataclass
class Journal:
    started: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    execute_cancelled: list[str] = field(default_factory=list)
    users: list[tuple[bool, str, str]] = field(default_factory=list)
    related: list[list[str]] = field(default_factory=list)
    running: asyncio.Event | None = None

    def mark_running(self) -> None:
        if self.running is not None:
            self.running.set()


class EchoExecutor(AgentExecutor):
    """Message mode: one direct reply."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_text_message(f"echo: {context.get_user_input()}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


class StreamingExecutor(AgentExecutor):
    """Task mode through TaskUpdater: working, artifact chunks, a file, then completed.

    ``slow``: seconds between chunks (a run in flight to hang up on); ``ask``: asks for input
    first and echoes the answer; ``reject``: rejects the task.
    """

    def __init__(self, journal: Journal | None = None, *, slow: float = 0.0) -> None:
        self.journal = journal or Journal()
        self.slow = slow

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        self.journal.started.append(task.id)
        user = context.call_context.user
        self.journal.users.append((user.is_authenticated, user.user_name, context.tenant))
        self.journal.related.append([t.id for t in context.related_tasks])
        text = context.get_user_input()
        if text == "reject":
            await updater.reject(updater.new_agent_message([new_text_part("not my job")]))
            return
        if text == "ask" and task.status.state != pb.TASK_STATE_INPUT_REQUIRED:
            await updater.requires_input(updater.new_agent_message([new_text_part("which?")]))
            return
        await updater.start_work(updater.new_agent_message([new_text_part("on it")]))
        self.journal.mark_running()
        words = f"you said {text}".split()
        artifact_id = "reply"
        try:
            for i, word in enumerate(words):
                if self.slow:
                    await asyncio.sleep(self.slow)
                await updater.add_artifact(
                    [new_text_part(word + (" " if i < len(words) - 1 else ""))],
                    artifact_id=artifact_id, name="reply", append=i > 0,
                    last_chunk=i == len(words) - 1)
        except asyncio.CancelledError:
            self.journal.execute_cancelled.append(task.id)
            raise
        await updater.add_artifact(
            [new_raw_part(b"\x00\x01binary", media_type="application/octet-stream",
                          filename="data.bin")], name="file")
        await updater.complete(updater.new_agent_message([new_text_part("done")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.journal.cancelled.append(context.task_id or "")
        task = context.current_task
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        if task is None or task.status.state not in (pb.TASK_STATE_CANCELED,):
            await updater.cancel()


class RaisingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise RuntimeError("secret database password in this message")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        pass


class StatusBeforeTaskExecutor(AgentExecutor):
    """Breaks a rule: a status update for a new task before its Task."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.start_work()
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        pass


class MessageAfterTaskExecutor(AgentExecutor):
    """Breaks a rule, and swallows the error it gets: a Message in task mode."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
        with contextlib.suppress(Exception):
            await event_queue.enqueue_event(new_text_message("a bare message"))
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        pass


class StubbornExecutor(AgentExecutor):
    """Ignores cancellation: catches CancelledError and keeps going (for a while)."""

    def __init__(self, journal: Journal, *, lifetime: float = 3.0) -> None:
        self.journal = journal
        self.lifetime = lifetime
        self.finished = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
        self.journal.started.append(context.task_id or "")
        self.journal.mark_running()
        loop = asyncio.get_running_loop()
        end = loop.time() + self.lifetime
        while loop.time() < end:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                self.journal.execute_cancelled.append(context.task_id or "")
        self.finished.set()
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.journal.cancelled.append(context.task_id or "")


class HeldStreamExecutor(AgentExecutor):
    """Reads a stream (nested async generators, like an SDK's over an HTTP response) and
    awaits something else between two items, as BeeAI awaits its ``new_token`` observers; the
    stream stays referenced after execute ends (BeeAI's: by a reference cycle), so only an
    explicit ``aclose`` runs its ``finally`` (the one that would close the connection).
    ``closed`` lists the task ids whose stream was closed; ``items`` how many to read."""

    def __init__(self, journal: Journal, *, items: int = 1_000_000) -> None:
        self.journal = journal
        self.items = items
        self.closed: list[str] = []
        self.held: list[object] = []

    async def _connection(self, task_id: str):  # type: ignore[no-untyped-def]
        try:
            while True:
                yield b"chunk"
        finally:
            self.closed.append(task_id)

    async def _tokens(self, task_id: str):  # type: ignore[no-untyped-def]
        async for chunk in self._connection(task_id):
            yield chunk.decode()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
        task_id = context.task_id or ""
        self.journal.started.append(task_id)
        stream = self._tokens(task_id)
        self.held.append(stream)
        count = 0
        async for _ in stream:
            self.journal.mark_running()
            count += 1
            if count >= self.items:
                break
            await asyncio.sleep(0.01)  # an observer of each token
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.journal.cancelled.append(context.task_id or "")


class RelayingExecutor(AgentExecutor):
    """A relay's progress: a working update carrying the metadata of what it relays (here the
    user message's own, as a proxy passes on a downstream agent's status metadata), then
    1.5 s of work, then completed."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        from google.protobuf import json_format

        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        relayed = json_format.MessageToDict(context.message.metadata)
        await updater.update_status(pb.TASK_STATE_WORKING, metadata=relayed)
        await asyncio.sleep(1.5)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()
