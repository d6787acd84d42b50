"""The A2A methods: what each JSON-RPC call does, on top of the runner and the task store.

Each method is ``async def (call, out)``. It raises :class:`A2AError` for a JSON-RPC error (the
app answers it as JSON, or as a final SSE event once a stream has started) and writes its answer
through ``out``: one ``result`` for a unary call, ``event``\\ s for a stream.

Cancellation: every method runs in its request's scope. When the caller hangs up, the disconnect
watcher cancels that scope, the method's ``with run.hold():`` exits, and an interactive run with
no other holder is cancelled with reason ``hang-up``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from ..protocol.dialect import Dialect
from ..protocol.errors import (
    ExtendedCardNotConfigured,
    InvalidParams,
    PushNotSupported,
    UnsupportedOperation,
)
from ..protocol.jsonrpc import decode_params
from ..protocol.method import (
    BAD_LAST_EVENT_ID,
    MAX_EVENT_ID_DIGITS,
    Call,
    Method,
    Output,
    watches_hangup,
)
from ..protocol.principal import ANONYMOUS, owner_key
from ..protocol.trajectory import (
    TRAJECTORY_EXTENSION_URI,
    TrajectoryEvent,
    TrajectoryPage,
    TrajectoryRead,
    event_kind,
)
from ..protocol.types import (
    ListTasksRequest,
    ListTasksResponse,
    Task,
    normalize_timestamp,
)
from ..push.rpc import PushRpc
from ..push.service import PushService
from ..runtime.outcome import DIRECT_REPLY, direct_reply
from ..runtime.run import Run
from ..runtime.runner import Runner
from ..runtime.tail import ends_stream, tail
from ..store.base import TaskStore
from .end_lost import end_not_stored, lost_end
from .frames import FrameCache
from .input_modes import InputModes
from .send_setup import SendSetup, accepted

_encode = msgspec.json.Encoder().encode

MAX_PAGE_SIZE = 100
"""The largest ListTasks ``pageSize`` (the 1.0 proto's maximum)."""

_RERUN = b""
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


def _lost(run: Run) -> BaseException | None:
    why = lost_end(run)
    return end_not_stored(run.task_id, why) if why is not None else None


class Methods:
    """The method table of one app."""

    def __init__(
        self,
        runner: Runner,
        store: TaskStore,
        *,
        keepalive_every: float,
        extended_card: Callable[[], bytes] | None = None,
        trajectory_page_events: int = 500,
        trajectory_page_bytes: int = 1 << 20,
        push: PushService | None = None,
        input_modes: InputModes | None = None,
    ) -> None:
        self.runner = runner
        self.store = store
        self.keepalive_every = keepalive_every
        self.frames = FrameCache()
        """Snapshots and events encoded once, shared by every stream that sends them."""
        self.extended_card = extended_card
        self.page_events = trajectory_page_events
        self.page_bytes = trajectory_page_bytes
        self.table: dict[str, Method] = {
            "SendMessage": self.send_message,
            "SendStreamingMessage": self.send_streaming_message,
            "GetTask": self.get_task,
            "ListTasks": self.list_tasks,
            "CancelTask": self.cancel_task,
            "SubscribeToTask": self.subscribe,
            "CreateTaskPushNotificationConfig": self.push_not_supported,
            "GetTaskPushNotificationConfig": self.push_not_supported,
            "ListTaskPushNotificationConfigs": self.push_not_supported,
            "DeleteTaskPushNotificationConfig": self.push_not_supported,
            "GetExtendedAgentCard": self.get_extended_card,
        }
        # Push notifications (scoped_a2a.push): the config methods, unless switched off.
        self.push = push if push is not None and push.enabled else None
        if self.push is not None:
            self.table.update(PushRpc(self.push, store).table)
        self.sends = SendSetup(runner, store, self.push, input_modes)
        """What a send does before its answer: checks, claims, the task and its run."""

    # --- sending --------------------------------------------------------------------------

    @watches_hangup
    async def send_message(self, call: Call, out: Output) -> None:
        req = call.dialect.send_params(call.rpc.params)
        history = req.configuration.history_length if req.configuration else None
        follow_up = req.message.task_id is not None
        # Twice at most: a resend that followed its task's run in another process, which was
        # then cut off (e.g. its first caller's hang-up reached that process after it said the
        # run went on), sends again: the claim then runs the message again, once (resend.py).
        for again in (True, False):
            task, run, pos = await self.sends.begin(req, call.dialect.v1, call.principal)
            if req.configuration is not None and req.configuration.return_immediately:
                if follow_up:
                    task = accepted(task, req.message)
                await out.result(call.dialect.send_result(trim(task, history)))
                return
            answered = await self._send_answer(
                call, out, task, run, pos, history,
                req.message.message_id if again and not follow_up else None)
            if answered != _RERUN:
                if answered is not None:
                    await out.result(answered)
                return

    async def _send_answer(self, call: Call, out: Output, task: Task, run: Run, pos: int,
                           history: int | None, rerun_id: str | None) -> bytes | None:
        """A blocking send's answer, once ``run`` settles; None when the caller hung up (the
        hold's release cancels the run; the binding answers); :data:`_RERUN` when this is a
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
                    await tail(self.store, task_id, pos, stop=lambda: _lost(run))
                if watching.hung_up:
                    return None
                final, _ = await self.store.get(task_id)
                if rerun_id is not None and self.sends.resends.cut_off(run, final, rerun_id):
                    return _RERUN
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
            if (lost := _lost(run)) is not None:
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

    async def send_streaming_message(self, call: Call, out: Output) -> None:
        req = call.dialect.send_params(call.rpc.params)
        task, run, pos = await self.sends.begin(req, call.dialect.v1, call.principal)
        with run.hold("stream"):
            if task.status.state.terminal:
                # A resent message whose task has ended (or a run that ended meanwhile): the
                # snapshot already holds the end, so the events before it must not follow it
                # (states would go back from completed to working). The ended task, alone.
                task, pos = await self.store.get(task.id)
            # Not from the shared cache: begin may have awaited after reading this snapshot,
            # which the store changes in place as events are appended, so it is not certain to
            # be exactly "the task as of pos" that others could share. One stream, one copy.
            await out.event(call.dialect.stream_task_frame(task), pos)
            await self._stream(call, out, task.id, pos, run)

    async def _stream(self, call: Call, out: Output, task_id: str, after: int,
                      run: Run | None) -> None:
        """Write the log after ``after`` as SSE events until the task ends or is interrupted.

        ``run``: the task's run; if it ends and its end cannot be stored until an operator acts
        (a full disk), the stream ends at once with a retryable error event saying so
        (server/end_lost.py) rather than waiting with no word.

        Stops after the first terminal or interrupted status (the one :func:`tail` stops at).
        Keep-alives follow the bytes actually written: one goes out whenever this stream has
        written nothing for ``keepalive_every`` seconds, whether the log was quiet or only had
        events this stream filters out (trajectory events without the extension). Raises
        TaskNotFound if the task is evicted meanwhile; cancellation ends it at once.
        """
        dialect = call.dialect
        with_trajectory = TRAJECTORY_EXTENSION_URI in call.extensions
        cursor = after
        while True:
            # One write deadline per stretch between keep-alives (sse.py): it bounds each write,
            # and while the stream waits it is the keep-alive's time; then the block ends.
            with out.write_deadline():
                while True:
                    page = await self.store.read(task_id, cursor)
                    if page.entries:
                        end = ends_stream(page)
                        entries = page.entries if end is None else [
                            e for e in page.entries if e.position <= end]
                        if page.first_retained > cursor + 1:
                            # Events we never sent were dropped by the per-task cap: restart
                            # from the snapshot, which reflects all of them.
                            task, pos = await self.store.get(task_id)
                            await out.event(self.frames.task(dialect, task, pos),
                                            page.first_retained - 1)
                        # Every new event this reader found goes out together (few writes,
                        # not one per event: a reader that fell behind catches up in one go).
                        await out.events([
                            (self.frames.event(dialect, task_id, entry), entry.position)
                            for entry in entries
                            if with_trajectory or not isinstance(entry.event, TrajectoryEvent)])
                        if end is not None:
                            return
                        cursor = page.next
                        if page.has_more:
                            continue
                    elif page.task.status.state.terminal:
                        return  # ended before our cursor: nothing more will ever come
                    elif run is not None and (lost := _lost(run)) is not None:
                        raise lost  # nothing more until an operator acts: say so now
                    out.rest(self.keepalive_every)
                    await self.store.wait(task_id, cursor)
            # Nothing written for keepalive_every seconds (the cursor is where it was: events
            # that arrived as the block ended are read again after the keep-alive).
            await out.keepalive()

    # --- reading --------------------------------------------------------------------------

    async def get_task(self, call: Call, out: Output) -> None:
        req = call.dialect.get_params(call.rpc.params)
        await self.store.check_owner(req.id, owner_key(call.principal, req.tenant))
        task, _ = await self.store.get(req.id)
        await out.result(call.dialect.task(trim(task, req.history_length)))

    async def list_tasks(self, call: Call, out: Output) -> None:
        req = (
            ListTasksRequest()
            if call.rpc.params is None
            else decode_params(call.rpc.params, ListTasksRequest)
        )
        check_list_request(req)
        page = await self.store.list_tasks(req, owner=owner_key(call.principal, req.tenant))
        tasks = [
            trim(t, req.history_length, artifacts=req.include_artifacts) for t in page.tasks
        ]
        await out.result(
            _encode(ListTasksResponse(tasks=tasks, next_page_token=page.next_page_token,
                                      page_size=page.page_size, total_size=page.total_size))
        )

    async def subscribe(self, call: Call, out: Output) -> None:
        req = call.dialect.subscribe_params(call.rpc.params)
        await self.store.check_owner(req.id, owner_key(call.principal, req.tenant))
        task, pos = await self.store.get(req.id)
        resume = call.last_event_id
        if resume == BAD_LAST_EVENT_ID:
            raise InvalidParams(
                "the Last-Event-ID header must be the id: of an event this server sent (ASCII "
                f"digits, at most {MAX_EVENT_ID_DIGITS}); omit it to start from the task snapshot"
            )
        if task.status.state.terminal and (resume is None or resume >= pos):
            raise UnsupportedOperation(
                f"task {task.id!r} is {task.status.state.name.lower()}; subscribe to a task "
                "that has not ended (GetTask reads an ended one)"
            )
        run = self.runner.get(task.id)
        hold = run.hold("subscribe") if run is not None else _no_hold()
        if run is None:  # ended, its end perhaps waiting for room in the store
            run = self.runner.ending.retrying_run(task.id)
            if run is not None and (lost := _lost(run)) is not None:
                raise lost
        with hold:
            if resume is None:
                await out.event(self.frames.task(call.dialect, task, pos), pos)
                after = pos
            else:
                # Headers now: the next event may be a long way off (resuming at the log's end).
                await out.start_stream()
                after = max(0, min(resume, pos))
            await self._stream(call, out, task.id, after, run)

    async def cancel_task(self, call: Call, out: Output) -> None:
        req = call.dialect.cancel_params(call.rpc.params)
        await self.store.check_owner(req.id, owner_key(call.principal, req.tenant))
        # Who asked is kept with the end (as the console's cancels are); anonymous: nobody.
        by = None if call.principal.id == ANONYMOUS.id else call.principal.id
        task = await self.runner.cancel_task(req.id, by=by)
        await out.result(call.dialect.task(task))

    async def push_not_supported(self, call: Call, out: Output) -> None:
        raise PushNotSupported("push notifications are not supported by this server")

    async def get_extended_card(self, call: Call, out: Output) -> None:
        if self.extended_card is None:
            raise ExtendedCardNotConfigured("this agent has no extended agent card")
        await out.result(self.extended_card())

    # --- the trajectory extension ---------------------------------------------------------

    async def read_trajectory(self, call: Call, out: Output) -> None:
        """One bounded cursor read of a task's log (``{task_id, after}`` -> a page)."""
        req = decode_params(call.rpc.params, TrajectoryRead)
        if req.after < 0:
            raise InvalidParams("after must not be negative")
        await self.store.check_owner(req.task_id, owner_key(call.principal, req.tenant))
        page = await self.store.read(
            req.task_id,
            req.after,
            max_events=min(req.max_events or self.page_events, self.page_events),
            max_bytes=min(req.max_bytes or self.page_bytes, self.page_bytes),
        )
        events = [
            msgspec.Raw(
                b'{"position":' + str(e.position).encode() + b',"kind":"'
                + event_kind(e.event).encode() + b'","event":' + e.encoded + b"}"
            )
            for e in page.entries
        ]
        await out.result(
            _encode(TrajectoryPage(state=page.task.status.state, events=events,
                                   next=page.next, has_more=page.has_more))
        )


def check_list_request(req: ListTasksRequest) -> None:
    """Refuse ListTasks params the 1.0 proto rules out, before any store is asked (-32602).

    Normalizes ``statusTimestampAfter`` in place to the stored timestamps' own form (UTC,
    milliseconds, ``Z``), so every store can compare the two as strings.
    """
    if req.page_size is not None and not 1 <= req.page_size <= MAX_PAGE_SIZE:
        raise InvalidParams(f"pageSize must be between 1 and {MAX_PAGE_SIZE}")
    if req.history_length is not None and req.history_length < 0:
        raise InvalidParams("historyLength must not be negative")
    if req.status_timestamp_after is not None:
        req.status_timestamp_after = normalize_timestamp(
            req.status_timestamp_after, field="statusTimestampAfter")


class _no_hold:
    """A stand-in for ``run.hold()`` when the task has no live run."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None

