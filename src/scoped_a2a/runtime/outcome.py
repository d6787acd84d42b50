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

from ..protocol.types import Message, Task, TaskState

DIRECT_REPLY = "direct-reply"
"""The end reason of a run whose agent returned a :class:`Message` (a direct reply)."""

ENDING_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.REJECTED, TaskState.CANCELED})


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
