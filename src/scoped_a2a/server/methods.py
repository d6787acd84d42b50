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

import msgspec

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
from ..protocol.trajectory import TrajectoryPage, TrajectoryRead, event_kind
from ..protocol.types import ListTasksRequest, ListTasksResponse, normalize_timestamp
from ..push.rpc import PushRpc
from ..push.service import PushService
from ..runtime.runner import Runner
from ..store.base import TaskStore
from .answers import RERUN, BlockingSend, trim
from .end_lost import lost_error
from .frames import FrameCache
from .input_modes import InputModes
from .log_stream import LogStream
from .send_setup import SendSetup, accepted

_encode = msgspec.json.Encoder().encode

MAX_PAGE_SIZE = 100
"""The largest ListTasks ``pageSize`` (the 1.0 proto's maximum)."""

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
        self.blocking = BlockingSend(runner, store, self.sends)
        """A blocking send's wait for its run to settle, and its answer (:mod:`.answers`)."""
        self.streams = LogStream(store, self.frames, keepalive_every)
        """The task log written to stream callers (:mod:`.log_stream`)."""

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
            answered = await self.blocking.answer(
                call, out, task, run, pos, history,
                req.message.message_id if again and not follow_up else None)
            if answered != RERUN:
                if answered is not None:
                    await out.result(answered)
                return

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
            await self.streams.follow(call, out, task.id, pos, run)

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
            if run is not None and (lost := lost_error(run)) is not None:
                raise lost
        with hold:
            if resume is None:
                await out.event(self.frames.task(call.dialect, task, pos), pos)
                after = pos
            else:
                # Headers now: the next event may be a long way off (resuming at the log's end).
                await out.start_stream()
                after = max(0, min(resume, pos))
            await self.streams.follow(call, out, task.id, after, run)

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

