"""Any replica answers any call: a follow-up for a run held by another process is handed to it.

A run parked in ``ctx.ask`` lives in the process that started it. Behind a load balancer the
answer may reach another replica, which used to refuse it (-32004, "send follow-ups to the
replica that holds its run"). Now that replica (the *sender*) hands the message to the holder
through the store's transport (``store/handover.py``: Redis pub/sub, PostgreSQL LISTEN/NOTIFY)
and answers its caller from the shared event log, exactly as the holder would have:

1. The sender publishes a ``hand`` envelope (the message, the log position its caller follows
   from, whether it asked not to wait) to every process.
2. The process whose runner holds the run delivers it (``Runner.resume``: the same checks as a
   local follow-up: a run that is not waiting for input refuses it) and takes a hold on the run
   for the sender's caller, both synchronously, so the resumed run is not cancelled for want of
   a holder; it replies ``reply`` (delivered, or the error a local caller would have got).
3. The sender's caller follows the log (blocking send, stream) holding a stand-in
   (:class:`HandedRun`); when it lets go before the run parks again or ends (a hang-up), the
   sender publishes ``release`` and the holder drops its hold, so the hang-up cancels the run
   as it would have on the holder. The holder drops its hold by itself once the run parks
   again or ends (the caller's answer). If the sender dies meanwhile (its ``release`` can
   never come), the holder drops the holds it keeps for that sender once the sender's liveness
   lease has lapsed (checked every third of the lease, :meth:`Handovers._drop_orphans`): the
   caller's connection died with its process, which is a hang-up.

No reply within :data:`HANDOVER_WAIT` seconds: if the log shows the message was taken (the
reply was lost), the caller follows the log as usual; if the task ended meanwhile (its holder
died and the liveness lease rule recorded it lost, ``store/liveness.py``), the caller is
answered with that end; a queued task refuses as before; otherwise the sender waits up to
one lease for the lease rule to settle it, then answers -32000 "try again".

Cancellation: :meth:`Handovers.hand` cancelled before the reply leaves the hand-over to the
holder (the message is delivered or not; a resend finds its claim). Errors: ServerUnavailable
when the store cannot carry the envelope.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager

import anyio
import msgspec
from anyio.abc import TaskGroup

from ..protocol.errors import A2AError, ServerUnavailable, UnsupportedOperation, error_from_code
from ..protocol.ids import new_id
from ..protocol.types import Message, Task, TaskState
from ..store.base import TaskStore
from ..store.handover import (
    HAND,
    PROBE,
    RELEASE,
    REPLY,
    Envelope,
    HandoverTransport,
    decode,
    encode,
)
from ..store.outage_log import OutageLog
from .run import Run
from .runner import Runner
from .tail import tail

log = logging.getLogger("scoped_a2a.handover")
_outages = OutageLog(log)

HANDOVER_WAIT = 3.0
"""Seconds a sender waits for the holder's reply (pub/sub delivers in about a millisecond)."""

PROBE_WAIT = 1.0
"""Seconds a resend waits to hear whether a process runs its task (``settle``)."""

SETTLE_WAIT = 15.0
"""Seconds past :data:`HANDOVER_WAIT` a sender with no reply waits for the task to end (the
liveness lease rule records a dead holder's run lost), at most; then "try again"."""


class HandedRun(Run):
    """The sender's stand-in for a run held by another process: holding it keeps the holder's
    hold; releasing the last hold before the answer tells the holder (``release``)."""

    def __init__(self, task_id: str, context_id: str, detach_reason: str | None,
                 release: Callable[[], None] | None) -> None:
        super().__init__(task_id, context_id, detach_reason)
        self._release = release

    def cancel(self, reason: str, *, by: str | None = None) -> None:
        # Called when the last hold goes (Run._release_check); once is enough.
        if not self.done.is_set():
            self.done.set()
            if self._release is not None:
                self._release()


class Handovers:
    """The hand-over of one app's follow-ups, both ways. Serve it with :meth:`serving`."""

    def __init__(self, runner: Runner, store: TaskStore, transport: HandoverTransport,
                 *, settle_wait: float | None = None) -> None:
        self.runner = runner
        self.store = store
        self.transport = transport
        leases = store.process_leases()
        self.settle_wait = settle_wait if settle_wait is not None else (
            min(SETTLE_WAIT, leases.lease * 4 / 3 + 1) if leases is not None else 0.0)
        self._replies: dict[str, list[object]] = {}  # hand-over id -> [Event, Envelope | None]
        # hand-over id -> (the sender's process, the hold kept here for its caller)
        self._holds: dict[str, tuple[str, anyio.CancelScope]] = {}
        self._tg: TaskGroup | None = None
        transport.listen(self._received)

    @asynccontextmanager
    async def serving(self, nursery: TaskGroup) -> AsyncIterator[None]:
        """Take hand-overs (and send this process's replies and releases) in ``nursery`` for
        the ``async with`` body; on exit the holds kept for other processes' callers go."""
        scope = anyio.CancelScope()
        started = anyio.Event()

        async def serve() -> None:
            with scope:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    started.set()
                    await self._drop_orphans()
            self._tg = None

        nursery.start_soon(serve, name="scoped_a2a hand-over")
        await started.wait()
        try:
            yield
        finally:
            scope.cancel()
            self._tg = None

    # --- the sender -----------------------------------------------------------------------

    async def hand(self, task: Task, message: Message, detach_reason: str | None,
                   position: int, marker: str | None = None) -> Run:
        """Hand ``message`` (a follow-up to ``task``, read at ``position``) to the process
        holding its run; return the stand-in its caller holds while following the log.
        ``marker``: why this server would run the follow-up detached (:meth:`Runner.resume`).

        Raises the holder's refusal (e.g. -32004, the run is not waiting for input), or
        ServerUnavailable while this process shuts down, or when no process answered and the
        task did not end.
        """
        self.runner.check_accepting()  # shutting down: follow-ups are refused, as here
        hand_id = new_id()
        slot: list[object] = [anyio.Event(), None]
        self._replies[hand_id] = slot
        try:
            await self.transport.send(None, encode(Envelope(
                HAND, hand_id, sender=self.transport.process_id, task_id=task.id,
                message=message, detach_reason=detach_reason, position=position,
                marker=marker)))
            with anyio.move_on_after(HANDOVER_WAIT):
                event = slot[0]
                assert isinstance(event, anyio.Event)
                await event.wait()
        finally:
            del self._replies[hand_id]
        reply = slot[1]
        if isinstance(reply, Envelope):
            if reply.code:
                raise error_from_code(reply.code, reply.text)
            holder = reply.sender
            return HandedRun(task.id, task.context_id, detach_reason,
                             lambda: self._post(self._send, holder, encode(
                                 Envelope(RELEASE, hand_id))))
        return await self._unanswered(task, message, detach_reason)

    async def _unanswered(self, task: Task, message: Message,
                          detach_reason: str | None) -> Run:
        """No process replied: decide from the shared log (see the module's docstring)."""
        stand_in = HandedRun(task.id, task.context_id, detach_reason, None)
        with anyio.move_on_after(self.settle_wait):
            while True:
                now, last = await self.store.get(task.id)
                if any(m.message_id == message.message_id for m in now.history or ()):
                    return stand_in  # it was delivered; only the reply was lost
                if now.status.state.terminal:
                    return stand_in  # e.g. its holder died: the caller reads that end
                if now.status.state is TaskState.SUBMITTED:
                    raise UnsupportedOperation(
                        f"task {task.id!r} is queued: its run has not started yet; send "
                        "follow-ups once it asks for input or ends")
                await self.store.wait(task.id, last)
        raise ServerUnavailable(
            f"no server process answered for the run of task {task.id!r}; try again")

    # --- a resend whose run is elsewhere (server/resend.py) ----------------------------

    async def settle(self, task: Task, wait_if_cancelled: float) -> Task:
        """``task`` (not ended, its run not here) once its run's fate is known: at once if a
        process runs it; once it ended if that process is cancelling it (``wait_if_cancelled``
        seconds at most, e.g. its caller hung up); once the lease rule recorded it if no process
        answers for a run a lease covers (its process died: ``settle_wait`` at most). A resend
        of the task's message then decides on its end whether to run the message again.
        "Running" may be said just before that process notices its caller's hang-up: a
        blocking resend that then sees the run end for a rerun reason sends again
        (``Resends.cut_off``)."""
        leases = self.store.process_leases()
        if leases is None or not await leases.covers(task.id):
            return task  # a queued run: the queue's own lease takes care of it
        reason = await self._probe(task.id)
        wait = self.settle_wait if reason is None else wait_if_cancelled if reason else 0.0
        with anyio.move_on_after(wait):
            while True:
                task, last = await self.store.get(task.id)
                if task.status.state.terminal:
                    break
                await self.store.wait(task.id, last)
        return task

    async def _probe(self, task_id: str) -> str | None:
        """Why the run of ``task_id`` is being cancelled where it runs ("" not at all), or
        None if no process answered within :data:`PROBE_WAIT`."""
        probe_id = new_id()
        slot: list[object] = [anyio.Event(), None]
        self._replies[probe_id] = slot
        try:
            await self.transport.send(None, encode(Envelope(
                PROBE, probe_id, sender=self.transport.process_id, task_id=task_id)))
            with anyio.move_on_after(PROBE_WAIT):
                event = slot[0]
                assert isinstance(event, anyio.Event)
                await event.wait()
        finally:
            del self._replies[probe_id]
        reply = slot[1]
        return reply.text if isinstance(reply, Envelope) else None

    # --- the holder -----------------------------------------------------------------------

    def _received(self, payload: bytes) -> None:
        """An envelope for this process (called by the transport's listener; never raises)."""
        try:
            env = decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("dropped a malformed hand-over message: %s", exc)
            return
        if env.kind == REPLY:
            slot = self._replies.get(env.id)
            if slot is not None:
                slot[1] = env
                event = slot[0]
                assert isinstance(event, anyio.Event)
                event.set()
        elif env.kind == RELEASE:
            hold = self._holds.get(env.id)
            if hold is not None:
                hold[1].cancel()
        elif env.kind == PROBE and self._tg is not None:
            run = self.runner.get(env.task_id)
            if run is not None:
                reply = Envelope(REPLY, env.id, sender=self.transport.process_id,
                                 text=run.cancel_reason or "")
                log.info("probe of task %s from process %s: %s", env.task_id, env.sender,
                         f"being cancelled ({reply.text})" if reply.text else "running")
                self._post(self._send, env.sender, encode(reply))
        elif env.kind == HAND and self._tg is not None:
            try:
                self._take(env)
            except Exception:  # a bug here must not stop the store's listener
                log.exception("taking the hand-over of task %s failed", env.task_id)

    def _take(self, env: Envelope) -> None:
        """Deliver a handed follow-up to the run held here, if there is one (synchronously:
        the hold for the sender's caller is taken before the resumed run can check it)."""
        run = self.runner.get(env.task_id)
        if run is None or env.message is None:
            return  # not here (another process holds it, or nobody)
        reply = Envelope(REPLY, env.id, sender=self.transport.process_id)
        stack = ExitStack()
        try:
            self.runner.resume(run, env.message, env.detach_reason, env.marker)
            if env.detach_reason is None:
                stack.enter_context(run.hold("send"))
        except A2AError as exc:
            reply.code, reply.text = exc.code, exc.message
        self._post(self._send, env.sender, encode(reply))
        if not reply.code and env.detach_reason is None:
            self._post(self._hold, env, stack)

    async def _drop_orphans(self) -> None:
        """Every third of the lease, until cancelled: drop the holds kept for senders whose
        lease lapsed (they died with their caller's connection). Never raises for store
        trouble (logged, rate-limited; the next period tries again)."""
        leases = self.store.process_leases()
        if leases is None:
            await anyio.sleep(math.inf)
            return
        while True:
            await anyio.sleep(leases.lease / 3)
            senders = {sender for sender, _ in self._holds.values()}
            if not senders:
                continue
            try:
                alive = await leases.alive(senders)
            except ServerUnavailable as exc:
                _outages.failed("orphans", "could not check the senders of hand-overs: %s", exc)
                continue
            _outages.recovered("orphans")
            for hand_id, (sender, scope) in list(self._holds.items()):
                if sender not in alive:
                    log.info("hand-over %s: its sender %s stopped renewing its lease; the "
                             "hold kept for its caller goes (a hang-up)", hand_id, sender)
                    scope.cancel()

    def _post(self, fn: Callable[..., object], *args: object) -> None:
        tg = self._tg
        if tg is not None:
            tg.start_soon(fn, *args)  # type: ignore[arg-type]

    async def _send(self, to: str, payload: bytes) -> None:
        try:
            await self.transport.send(to, payload)
        except ServerUnavailable as exc:
            _outages.failed("send", "could not send a hand-over message to process %s: %s",
                            to, exc)

    async def _hold(self, env: Envelope, stack: ExitStack) -> None:
        """Keep the hold taken for the sender's caller until the run parks again or ends, or
        the sender says its caller let go (``release``)."""
        scope = anyio.CancelScope()
        self._holds[env.id] = (env.sender, scope)
        try:
            with stack, scope:
                await tail(self.store, env.task_id, env.position)
        except Exception as exc:  # the task went (evicted), the store failed: let go
            log.info("hand-over hold of task %s ended: %s", env.task_id, exc)
        finally:
            del self._holds[env.id]
