"""How an agent ends its task in a state other than ``completed``, or with a whole message.

An agent's return value decides its task's end: a string (or None) completes it with that text
as the status message. To end it otherwise the agent returns an :class:`Outcome`: a terminal
state (``completed``, ``failed``, ``rejected``, ``canceled``) with the message the caller reads,
kept whole (parts, metadata and id as the agent made them). This is how adapted frameworks hand
over the end their agent chose (an a2a-sdk executor's ``TaskUpdater.reject()``), and how an
agent of our own rejects a task: ``return Outcome.rejected("out of scope: ask about orders")``.

Cancellation still wins: a run whose scope was cancelled is recorded ``canceled`` with its
reason whatever it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from ..protocol.ids import new_id
from ..protocol.types import Message, Part, Role, Task, TaskState

DIRECT_REPLY = "direct-reply"
"""The end reason of a run whose agent returned a :class:`Message` (a direct reply)."""

ENDING_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.REJECTED, TaskState.CANCELED})

OUTCOME_REASONS = {
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.REJECTED: "rejected",
    TaskState.CANCELED: "agent-canceled",
}
"""The end reason of an :class:`Outcome` that names none."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The end an agent chose: a terminal ``state`` and the ``message`` (or text) with it.

    ``reason``: the end reason recorded in the log line and the status metadata (default:
    the state's name, e.g. ``rejected``).
    """

    state: TaskState
    message: Message | str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.state not in ENDING_STATES:
            raise ValueError(
                f"an Outcome ends the task: its state must be one of "
                f"{sorted(s.name.lower() for s in ENDING_STATES)}, not {self.state.name.lower()}")

    @classmethod
    def rejected(cls, message: Message | str | None = None) -> Outcome:
        """The agent will not do this task (A2A ``TASK_STATE_REJECTED``)."""
        return cls(TaskState.REJECTED, message)

    @classmethod
    def completed(cls, message: Message | str | None = None) -> Outcome:
        return cls(TaskState.COMPLETED, message)

    @classmethod
    def failed(cls, message: Message | str | None = None) -> Outcome:
        """A failure the agent reports itself (its message is sent to the caller as is)."""
        return cls(TaskState.FAILED, message)


def direct_reply(task: Task) -> Message | None:
    """The agent's direct reply, if ``task`` ended with one; else None.

    An agent that returns a ``Message`` answers with that message and no task (the
    specification lets an agent answer a SendMessage with either). The run still has a task
    record (it was stored before the agent ran): it is completed, and its status message is the
    reply, recorded without a ``taskId`` (the reply belongs to no task). That missing id is
    what marks it: every other status message the runner records carries its task's id.
    """
    msg = task.status.message
    if task.status.state is TaskState.COMPLETED and msg is not None and msg.task_id is None:
        return msg
    return None


def end_of(reply: object) -> tuple[TaskState, str | Message | None, str]:
    """The end (state, text or message, reason) of a run whose agent returned ``reply``.

    A str or None completes the task with that text; an :class:`Outcome` ends it as it says;
    a :class:`Message` is a direct reply; anything else fails the task, saying what was
    returned.
    """
    if isinstance(reply, Outcome):
        return reply.state, reply.message, reply.reason or OUTCOME_REASONS[reply.state]
    if isinstance(reply, Message):
        # A direct reply: the caller of a blocking send gets this message, not the task
        # (direct_reply reads it back from the ended task).
        return TaskState.COMPLETED, reply, DIRECT_REPLY
    if reply is not None and not isinstance(reply, str):
        return TaskState.FAILED, (f"the agent returned {type(reply).__name__}, not str, "
                                  "Message, Outcome or None"), "error"
    return TaskState.COMPLETED, reply, "completed"


def end_message(state: TaskState, text: str | Message | None, reason: str, *, task_id: str,
                context_id: str, error_id: str | None = None) -> Message | None:
    """The status message a run's end is recorded with (None: no text).

    A direct reply carries no task id (what :func:`direct_reply` looks for); every other
    message is tied to the task, and one that does not complete it names the ``reason`` (and
    the ``errorId`` of a failure) in its metadata. Raises ValueError for text that cannot be
    sent (see :func:`agent_message`).
    """
    if isinstance(text, Message) and reason == DIRECT_REPLY:
        return msgspec.structs.replace(text, task_id=None, context_id=context_id)
    if isinstance(text, Message):
        # The agent's own message (an Outcome): kept whole, tied to this task.
        msg = msgspec.structs.replace(text, task_id=task_id, context_id=context_id)
        if state is not TaskState.COMPLETED:
            msg.metadata = {"reason": reason, **(msg.metadata or {})}
        return msg
    if text is None:
        return None
    msg = agent_message(text, task_id=task_id, context_id=context_id)
    if state is not TaskState.COMPLETED:
        msg.metadata = {"reason": reason}
        if error_id is not None:
            msg.metadata["errorId"] = error_id
    return msg


def check_text(text: object) -> None:
    """Refuse a non-str text before it is logged: msgspec structs do not check types when
    built, and a log event that encodes but cannot be read back would break every later read
    of its task (the agent gets the TypeError; its run fails with it)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")


def agent_message(text: str, *, task_id: str, context_id: str) -> Message:
    """The agent's message holding ``text``, tied to a task (status messages, ends)."""
    check_text(text)
    return Message(
        message_id=new_id(),
        role=Role.AGENT,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )
