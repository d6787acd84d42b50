"""A send's set-up: what SendMessage and SendStreamingMessage do before their answer.

The message is checked (parts, input modes, history length, deadline, push config), its
messageId claimed (:mod:`.resend`: a resent message is the same send), then a new task is stored
and its run started, or a follow-up is delivered to its task's run. Used by
:class:`.methods.Methods`; cancellation: see :meth:`SendSetup.begin`.
"""

from __future__ import annotations

import anyio
import msgspec

from ..protocol.deadline import budget_from
from ..protocol.errors import (
    InvalidParams,
    PushNotSupported,
    ServerUnavailable,
    UnsupportedOperation,
)
from ..protocol.ids import new_id
from ..protocol.on_disconnect import DETACHED_KEY, with_marker
from ..protocol.principal import ANONYMOUS, Principal, owner_key
from ..protocol.types import (
    Message,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from ..push.service import PushService
from ..runtime.handover import Handovers
from ..runtime.run import Run
from ..runtime.runner import Runner
from ..store.base import TaskStore
from ..store.claims import AlreadyClaimed, NewClaim
from ..store.snapshot import applied, carries_server_keys, server_keys_removed
from .input_modes import InputModes
from .resend import Resends, fingerprint

BEGIN_DEADLINE = 30.0
"""Seconds the shielded set-up of a send may take (a backstop: its awaits have their own)."""


class SendSetup:
    """The set-up of one app's sends; ``push``: None when push notifications are off."""

    def __init__(self, runner: Runner, store: TaskStore, push: PushService | None,
                 input_modes: InputModes | None) -> None:
        self.runner = runner
        self.store = store
        self.policy = runner.policy
        self.push = push
        self.input_modes = input_modes
        """The media types the card accepts in message parts (None: any; input_modes.py)."""
        self.resends = Resends(store, runner)
        """The messageId claims that make a resent message the same send (resend.py)."""
        self.handovers: Handovers | None = None
        """Hands follow-ups to the process holding their run, on a shared store (the app
        sets it; runtime/handover.py). None: a run held elsewhere refuses them."""

    async def begin(
        self, req: SendMessageRequest, v1: bool = True, principal: Principal = ANONYMOUS
    ) -> tuple[Task, Run, int]:
        """Create the task (or continue it) and start (or resume) its run, shielded.

        Shielded from the request's cancellation: a send whose body has arrived whole is
        carried through to a started run even if its caller hangs up meanwhile (the disconnect
        watcher cancels the request). Otherwise a hang-up landing on one of the awaits in here
        (the push URL's resolution, a store write) would drop a detached send that had arrived
        in full, or leave a stored task whose run never starts (SUBMITTED forever). The hang-up
        takes effect at the caller's next checkpoint, once it holds the run: an interactive run
        is then cancelled and recorded as hung up. The awaits in here are bounded (the push URL
        is resolved within ``connect_timeout``; store operations have their own deadlines), so
        the shield cannot hold a request forever.
        """
        cfg = req.configuration
        push = cfg.task_push_notification_config if cfg is not None else None
        if push is None and not self.store.may_suspend:
            # Nothing in here can wait (no push URL to resolve, a store that never waits), so
            # no cancellation can land in it and a shield would guard nothing.
            return await self._begin_unshielded(req, v1, principal)
        with anyio.move_on_after(BEGIN_DEADLINE, shield=True):
            return await self._begin_unshielded(req, v1, principal)
        raise ServerUnavailable(f"setting up the send took over {BEGIN_DEADLINE:g} s; try again")

    async def _begin_unshielded(
        self, req: SendMessageRequest, v1: bool, principal: Principal
    ) -> tuple[Task, Run, int]:
        """Create the task (or continue it) and start (or resume) its run.

        Returns the task snapshot, the run, and the log position to follow from. The caller
        must take its hold on the run before its next checkpoint. A push config in the send's
        configuration is checked first (a refused URL creates no task) and stored with the task
        before the run starts (``v1``: the caller's dialect, which shapes the deliveries).
        A new task is owned by ``principal`` within the request's tenant; a follow-up to a
        task of another principal (or tenant) is TaskNotFound, as if it did not exist.
        """
        owner = owner_key(principal, req.tenant)
        msg = req.message
        if not msg.parts:
            raise InvalidParams("the message has no parts")
        if self.input_modes is not None:
            self.input_modes.check(msg)  # -32005 / 400 before any task exists
        cfg = req.configuration
        if cfg is not None and cfg.history_length is not None and cfg.history_length < 0:
            # Checked here, not when the answer is trimmed: by then the task would exist.
            raise InvalidParams("configuration.historyLength must not be negative")
        budget_from(req.metadata, msg.metadata)  # a bad deadline is refused before a task exists
        reason = self.policy.detach_reason(
            return_immediately=bool(cfg and cfg.return_immediately),
            message_metadata=msg.metadata,
            request_metadata=req.metadata,
        )
        push_cfg = await self._accept_push(cfg.task_push_notification_config if cfg else None)
        fp = fingerprint(msg)  # before the ids are filled in below
        if msg.task_id:
            await self.store.check_owner(msg.task_id, owner)
            task, pos = await self.store.get(msg.task_id)
            # A resent follow-up answers as the first did (its task may have ended since).
            prior = await self.resends.claim(owner, msg, fp, task.id, pos, follow_up=True)
            if prior is not None:
                return self._resent(prior, req, reason)
            try:
                return await self._follow_up(req, v1, principal, owner, task, pos, reason,
                                             push_cfg)
            except BaseException:
                await self.resends.release(owner, msg, task.id)
                raise
        task_id = new_id()
        if self.store.claims_on_create and not self.runner.queues(reason):
            # The claim is made by the create's own write (one round trip less per send); a
            # messageId already claimed stores nothing and takes the resend path below.
            ids = msg.task_id, msg.context_id
            try:
                return await self._new_task(req, v1, principal, owner, task_id, reason,
                                            push_cfg, NewClaim(msg.message_id, fp))
            except AlreadyClaimed:
                msg.task_id, msg.context_id = ids  # as the caller sent it
            except BaseException:
                # The create failed (nothing stored, or its commit unknown), or the run never
                # started (recorded as ended): a resend may run it, as below.
                await self.resends.release(owner, msg, task_id)
                raise
        prior = await self.resends.claim(owner, msg, fp, task_id, 0, follow_up=False)
        if prior is not None:
            return prior
        try:
            return await self._new_task(req, v1, principal, owner, task_id, reason, push_cfg)
        except BaseException:
            # Nothing ran (or the run never started, recorded as ended): a resend may run it.
            await self.resends.release(owner, msg, task_id)
            raise

    async def _follow_up(
        self, req: SendMessageRequest, v1: bool, principal: Principal, owner: str, task: Task,
        pos: int, reason: str | None, push_cfg: TaskPushNotificationConfig | None,
    ) -> tuple[Task, Run, int]:
        """Deliver a follow-up message to ``task`` (read at ``pos``): resume or start its run."""
        msg = req.message
        if task.status.state.terminal:
            raise UnsupportedOperation(
                f"task {task.id!r} is {task.status.state.name.lower()}; a terminal task "
                "accepts no more messages"
            )
        if msg.context_id and msg.context_id != task.context_id:
            raise InvalidParams(f"task {task.id!r} belongs to another contextId")
        msg.context_id = task.context_id
        if push_cfg is not None:
            await self._set_push(task.id, push_cfg, v1, pos, task.status.state)
        marker = self._marker(reason, req)
        told = (task.metadata or {}).get(DETACHED_KEY)
        # Its claim is made now, not once delivered: after the delivery below nothing may wait
        # before the caller holds the run (a failure below releases the claim again).
        await self.resends.confirm(owner, msg, task.id)
        run = self.runner.get(task.id)
        if run is not None:
            self.runner.resume(run, msg, reason, marker)
            marker = run.marker
        elif self.handovers is not None:
            # Its run is held by another process (or by none): hand the message over. A run
            # once detached stays so, there as here.
            run = await self.handovers.hand(task, msg, reason, pos, marker)
            marker = told if isinstance(told, str) else marker
        else:
            run = await self.runner.launch(
                task, msg, request_metadata=req.metadata, detach_reason=reason, new=False,
                principal=principal, owner=owner, marker=marker,
            )
        if marker != told:
            # The answer (read before the run's first event says it) tells the caller at once
            # whether this turn's run is detached: a client giving up on it reads it here.
            task = msgspec.structs.replace(task, metadata=with_marker(task.metadata, marker))
        return task, run, pos

    def _resent(self, prior: tuple[Task, Run, int], req: SendMessageRequest,
                reason: str | None) -> tuple[Task, Run, int]:
        """A resent follow-up's answer: ``prior`` (the task as stored), saying the marker the
        first send's answer said while the run has not yet recorded the message (a resend at
        once, e.g. a webhook's second delivery): the snapshot read before that event still
        says the marker of the turn before."""
        task, run, pos = prior
        if any(m.message_id == req.message.message_id for m in task.history or ()):
            return prior  # recorded: the task says it (store/snapshot.py folded the marker)
        told = (task.metadata or {}).get(DETACHED_KEY)
        here = self.runner.get(task.id)
        # As _follow_up decided it: the run here says; one elsewhere keeps what the task says
        # of it, or takes this send's.
        marker = (here.marker if here is not None
                  else told if isinstance(told, str) else self._marker(reason, req))
        if marker == told:
            return prior
        return msgspec.structs.replace(task, metadata=with_marker(task.metadata, marker)), run, pos

    def _marker(self, reason: str | None, req: SendMessageRequest) -> str | None:
        """What the task says of a send's run (protocol/on_disconnect.py): why it runs
        detached, or None. ``returnImmediately`` alone says nothing (a client may poll for
        its caller and still own the run): then only what else would have detached it."""
        if reason != "return-immediately":
            return reason
        return self.policy.detach_reason(
            return_immediately=False, message_metadata=req.message.metadata,
            request_metadata=req.metadata)

    async def _new_task(
        self, req: SendMessageRequest, v1: bool, principal: Principal, owner: str, task_id: str,
        reason: str | None, push_cfg: TaskPushNotificationConfig | None,
        claim: NewClaim | None = None,
    ) -> tuple[Task, Run, int]:
        """Store a new task ``task_id`` for ``req``'s message and start its run; ``claim``:
        its message claim, made with the create (AlreadyClaimed: nothing stored)."""
        msg = req.message
        context_id = msg.context_id or new_id()
        msg.task_id, msg.context_id = task_id, context_id
        metadata = req.metadata
        marker = self._marker(reason, req)
        if marker is not None or carries_server_keys(metadata):
            # Said in the task, so a client giving up on it knows to leave it running (a CRM's
            # system event must survive its caller): protocol/on_disconnect.py. Only the
            # server says it: a caller's own ``detachedBy`` in its request is not repeated,
            # nor its ``downstreamTasks`` (the tree of calls is the run's record: snapshot.py).
            metadata = server_keys_removed(metadata, marker)
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.SUBMITTED, timestamp=utc_timestamp()),
            history=[msg],
            metadata=metadata,
        )
        self.runner.check_accepting()  # before the task is stored: refuse, store nothing

        async def stored() -> None:  # the task exists, its run has not started here yet
            if push_cfg is not None:
                await self._set_push(task_id, push_cfg, v1, 0, TaskState.SUBMITTED)

        # Stores the task (on a shared store, with its detached run queued durably), then
        # starts the run here unless it was queued.
        run = await self.runner.launch(
            task, msg, request_metadata=req.metadata, detach_reason=reason, new=True,
            stored=stored, principal=principal, owner=owner, claim=claim,
        )
        return task, run, 0

    async def _accept_push(
        self, config: TaskPushNotificationConfig | None
    ) -> TaskPushNotificationConfig | None:
        """Check a send's push config (-32602 saying why it is refused; -32003 if push is off)."""
        if config is None:
            return None
        if self.push is None:
            raise PushNotSupported("push notifications are not supported by this server")
        return await self.push.accept(config)

    async def _set_push(self, task_id: str, config: TaskPushNotificationConfig, v1: bool,
                        pos: int, state: TaskState) -> None:
        assert self.push is not None
        await self.push.set_config(task_id, config, v1=v1, after=pos, state=state)



def accepted(task: Task, message: Message) -> Task:
    """``task`` as the ``returnImmediately`` answer to a follow-up ``message`` shows it: working,
    the message last in its history, as the run's first event records it moments later.

    The snapshot :meth:`SendSetup.begin` returns was read before the follow-up, so it still
    says ``input-required``: a client polling for the turn's end would take that for the
    answer to this message. Unchanged when the history already holds the message (a resent
    follow-up answered from the log).
    """
    if any(m.message_id == message.message_id for m in task.history or ()):
        return task
    return applied(task, TaskStatusUpdateEvent(
        task_id=task.id, context_id=task.context_id,
        status=TaskStatus(state=TaskState.WORKING, message=message,
                          timestamp=utc_timestamp())))
