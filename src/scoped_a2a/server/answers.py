"""What the methods answer with a task, and a blocking send's wait for that answer.

:func:`trim` cuts a task to the history a caller asked for (GetTask, ListTasks, sends);
:func:`send_answer` is a blocking send's result (the agent's direct reply, or the task);
:class:`BlockingSend` waits for a blocking send's run to settle (ask for input, or end) and
answers with the task as it then is.

Cancellation: the wait runs in the request's scope, under the send's hold on the run. A
hang-up the wait reads on the caller's connection returns None (the hold's release then
cancels an interactive run); a cancellation of the scope propagates. Errors: the store's
(TaskNotFound for an evicted task), and ServerUnavailable for a run whose end cannot be
stored until an operator acts (server/end_lost.py), raised at once.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import msgspec

from ..protocol.dialect import Dialect
from ..protocol.errors import InvalidParams
from ..protocol.method import Call, Output
from ..protocol.types import Task
from ..runtime.outcome import DIRECT_REPLY, direct_reply
from ..runtime.run import Run
from ..runtime.runner import Runner
from ..runtime.tail import tail
from ..store.base import TaskStore
from .end_lost import lost_error
from .send_setup import SendSetup

RERUN = b""
"""A blocking resend's signal to send again: its task was cut off elsewhere (resend.py)."""


def trim(task: Task, history_length: int | None, *, artifacts: bool = True) -> Task:
    """A copy of ``task`` with at most ``history_length`` recent messages (None: all)."""
    if history_length is not None and history_length < 0:
        raise InvalidParams("historyLength must not be negative")
    history = task.history
    if history_length is not None and history is not None:
        # The most recent ``history_length`` messages; a length past the history is all of it.
        history = history[-history_length:] if history_length else None
    if history is task.history and (artifacts or task.artifacts is None):
        return task
    return msgspec.structs.replace(
        task, history=history, artifacts=task.artifacts if artifacts else None
    )


def send_answer(dialect: Dialect, task: Task, history_length: int | None) -> bytes:
    """A blocking send's result: the agent's direct reply (a message, no task), or the task."""
    reply = direct_reply(task)
    if reply is not None:
        return dialect.message_result(reply)
    return dialect.send_result(trim(task, history_length))


class BlockingSend:
    """Blocking sends' answers over one app's runner and store."""

    def __init__(self, runner: Runner, store: TaskStore, sends: SendSetup) -> None:
        self.runner = runner
        self.store = store
        self.sends = sends

    async def answer(self, call: Call, out: Output, task: Task, run: Run, pos: int,
                     history: int | None, rerun_id: str | None) -> bytes | None:
        """A blocking send's answer, once ``run`` settles; None when the caller hung up (the
        hold's release cancels the run; the binding answers); :data:`RERUN` when this is a
        resend of message ``rerun_id`` whose task, its run in another process, was cut off
        for a reason that reruns it (``Resends.cut_off``)."""
        task_id, dialect = task.id, call.dialect  # the closure keeps neither the task nor out

        async def answer(wait: float) -> bytes:
            # After a hang-up released the hold: an interactive run is being cancelled (reason
            # hang-up); its terminal state lands within milliseconds.
            with anyio.move_on_after(wait):
                await tail(self.store, task_id, pos)
            final, _ = await self.store.get(task_id)
            return send_answer(dialect, final, history)

        out.answer_on_hangup(answer)
        with run.hold("send"):
            answered: bytes | None = None
            if self.runner.get(task_id) is run and run.settled_at <= pos:
                # The run is here and has not settled since ``pos``: wait for it to settle in
                # this task, reading the connection meanwhile (no watcher task).
                hung_up, answered = await self._until_settled(out, run, task_id, dialect,
                                                              history)
                if hung_up:
                    return None  # the hold's release cancels the run
            if answered is None:
                # Anything else (a run in another process, a resent message, an end the
                # store has not taken yet) follows the log, beside a hang-up watcher.
                async with out.watching() as watching:
                    # Answered at once, retryable, if the run ends and its end cannot be
                    # stored.
                    await tail(self.store, task_id, pos, stop=lambda: lost_error(run))
                if watching.hung_up:
                    return None
                final, _ = await self.store.get(task_id)
                if rerun_id is not None and self.sends.resends.cut_off(run, final, rerun_id):
                    return RERUN
                answered = send_answer(dialect, final, history)
        return answered

    async def _until_settled(
        self, out: Output, run: Run, task_id: str, dialect: Dialect, history: int | None
    ) -> tuple[bool, bytes | None]:
        """Wait for ``run`` to settle (ask for input, or end) while reading the caller's
        connection: (False, the answer); (True, None) when the caller hung up first; (False,
        None) when the store does not hold the end yet (the caller then follows the log: a
        background retry is storing it).

        The run cancels this wait's scope as it settles (``Run.wake_when_settled``); the task
        is pinned meanwhile, so the store keeps it readable once ended (as ``wait`` does).
        Raises :func:`end_not_stored` for a run whose end the store refused for good.
        """
        self.store.pin(task_id)
        try:
            settled_at = run.settled_at
            # First let the run take its first step (the run's task was started just now, so
            # it comes before this task's next step: on asyncio at the first checkpoint, on
            # trio, which may reverse a batch, at the second). A run that needs no waiting
            # (a quick answer) then ends before this task starts watching: no wake-up to pay
            # for, no cancel scope. A hang-up meanwhile is read a tick later.
            for _ in range(2):
                if run.began:
                    break
                await anyio.lowlevel.checkpoint()
            if not run.done.is_set() and run.settled_at == settled_at:
                wake = anyio.CancelScope()
                run.wake_when_settled(wake)
                if await out.until_hangup(wake):
                    run.stop_waking(wake)
                    return True, None
            if (lost := lost_error(run)) is not None:
                raise lost
            if (run.end_reason not in (None, DIRECT_REPLY) and history is None and dialect.v1
                    and (ended := self.store.ended_json(task_id)) is not None):
                # The ended task as the store keeps it, sent on as it is (no decode, no
                # encode): what send_answer gives for a 1.0 task with its whole history.
                return False, b'{"task":' + ended + b"}"
            task, _ = await self.store.get(task_id)
        finally:
            self.store.unpin(task_id)
        state = task.status.state
        if not (state.terminal or state.interrupted):
            return False, None
        return False, send_answer(dialect, task, history)
