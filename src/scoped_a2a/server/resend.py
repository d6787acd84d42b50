"""Resent messages: a send whose messageId its caller already sent is that send, not a new run.

A client that retries after a dropped connection sends the same message again (same
``messageId``). Before a send takes effect, the method layer claims its messageId for its owner
(principal and tenant) in the task store (:meth:`~..store.base.TaskStore.claim_message`, atomic in
every store, across processes on Redis). A send that finds an earlier claim answers with the task
that claim names, as the first send would have:

- same message (same fingerprint): a blocking send waits for that task like the first did, a
  stream attaches to it as a holder, a ``returnImmediately`` send returns it at once; a resent
  follow-up answers with the state the first one was answered with (it is not delivered again);
- another message under the same messageId: -32602 saying so (an idempotency key reused with
  another body), never a second run;
- the first send of a new task ended ``canceled`` because its caller went away (reason
  ``hang-up``), the server shut down (``shutdown``) or died (``restart``, recorded by the SQLite
  store on the next start; ``process-lost``, recorded on a shared store by another process once
  the dead one's liveness lease lapsed; ``not-started``, recorded by PostgreSQL's store when
  the answer to its create was lost): the resend runs the message again as a new
  task, since the caller retrying is exactly what running it again means (it was never told an
  outcome it asked for). Every other outcome, a CancelTask included, is the answer.

docs/exactly-once.md has the rules and why. Cancellation: see :meth:`Resends.claim`.
"""

from __future__ import annotations

import hashlib
import logging

import anyio
import msgspec

from ..protocol.deadline import BUDGET_KEY, DEADLINE_KEY
from ..protocol.errors import InvalidParams, ServerUnavailable, TaskNotFound
from ..protocol.types import Message, Role, Task, TaskState
from ..runtime.handover import Handovers
from ..runtime.run import Run
from ..runtime.runner import Runner
from ..store.base import TaskStore
from ..store.claims import PriorSend
from ..store.liveness import LOST_REASON, UNSTARTED_REASON
from ..store.outage_log import OutageLog

log = logging.getLogger("scoped_a2a.resend")
_outages = OutageLog(log)

RERUN_REASONS = frozenset({"hang-up", "shutdown", "restart", LOST_REASON, UNSTARTED_REASON})
"""End reasons of a new task's run after which a resend of its message runs it again
(``restart``: a durable store recorded the interactive run the process died in, whose caller
was never answered; ``process-lost``: another process of a shared store did, once the dead
process's liveness lease lapsed, store/liveness.py; ``not-started``: the store lost the answer
to the task's create, so its send failed before its run started, store/postgres/unstarted.py)."""

PENDING_WAIT = 10.0
"""Seconds a resend waits for the first send of its messageId to store its task (a race of two
identical sends on two replicas); then -32000 "try again"."""

RESENT = "resent"
"""The detach reason of the stand-in a resend holds when its task's run is not here."""

HANGUP_WAIT = 5.0
"""Seconds a resend waits for a run being cancelled by its caller's hang-up to record its end."""

_encode_sorted = msgspec.json.Encoder(order="sorted").encode
_VOLATILE = (BUDGET_KEY, DEADLINE_KEY)  # a retry may carry a shorter budget: not the message


def fingerprint(msg: Message) -> bytes:
    """A 16-byte digest of the message as its caller sent it (before the server fills in ids).

    Keys are sorted, so the same message encoded with its fields in another order matches; the
    deadline extension's keys are left out (a retry may carry what is left of its budget).
    """
    meta = msg.metadata
    if meta and any(k in meta for k in _VOLATILE):
        meta = {k: v for k, v in meta.items() if k not in _VOLATILE} or None
        msg = msgspec.structs.replace(msg, metadata=meta)
    return hashlib.blake2b(_encode_sorted(msg), digest_size=16).digest()


def _reason(task: Task) -> str | None:
    message = task.status.message
    meta = message.metadata if message is not None else None
    reason = meta.get("reason") if meta else None
    return reason if isinstance(reason, str) else None


class Resends:
    """The claim check of one app's sends (used by :class:`.send_setup.SendSetup`)."""

    def __init__(self, store: TaskStore, runner: Runner) -> None:
        self.store = store
        self.runner = runner
        self.handovers: Handovers | None = None
        """Tells where a resent task's run is on a shared store (the app sets it)."""

    async def claim(
        self, owner: str, msg: Message, fp: bytes, task_id: str, position: int, *,
        follow_up: bool,
    ) -> tuple[Task, Run, int] | None:
        """Claim ``msg``'s messageId for ``task_id``: None if this send goes ahead (the caller
        must :meth:`release` the claim if the send then fails), else the earlier send's task,
        a run to hold (a stand-in that holds nothing when the run is not here) and the log
        position to follow from.

        Raises InvalidParams when the messageId was sent with another message, or when its
        task is no longer kept; ServerUnavailable when an identical send still being set up
        (on another replica) has not stored its task within PENDING_WAIT. Cancellation: the
        claim is either taken (the caller releases it on the way out) or not.
        """
        waited = 0
        deadline = anyio.current_time() + PENDING_WAIT
        while True:
            # Pending until made: by the new task's CREATE, or confirm() as a follow-up is
            # delivered (so a claim whose send failed unseen lapses instead of lying).
            prior = await self.store.claim_message(
                owner, msg.message_id, fp, task_id, position=position, created=False)
            if prior is None:
                return None
            if prior.fingerprint != fp:
                raise InvalidParams(
                    f"messageId {msg.message_id!r} was already sent with another message "
                    f"(task {prior.task_id!r}); a new message needs a new messageId")
            if not prior.created:
                # The first send is being set up right now (on another replica): wait.
                if anyio.current_time() >= deadline:
                    raise ServerUnavailable(
                        f"an identical send of messageId {msg.message_id!r} is still being "
                        "set up; try again")
                waited += 1
                await anyio.sleep(min(0.005 * 2 ** min(waited, 5), 0.1))
                continue
            try:
                task, pos = await self.store.get(prior.task_id)
            except TaskNotFound:
                raise InvalidParams(
                    f"messageId {msg.message_id!r} was already sent (task {prior.task_id!r}, "
                    "which is no longer kept); a new message needs a new messageId") from None
            if not follow_up and await self._rerun(task, msg.message_id):
                replaced = await self.store.reclaim_message(
                    owner, msg.message_id, prior.task_id, task_id)
                if replaced is None:
                    return None  # this send runs the message again, as task_id
                continue  # another resend got there first (or the claim went): look again
            return self._answer(task, pos, prior)

    async def _rerun(self, task: Task, message_id: str) -> bool:
        """Whether a resend of the message that created ``task`` runs it again."""
        if any(m.role is Role.USER and m.message_id != message_id for m in task.history or ()):
            # The task went on with follow-ups (its first answer reached the caller), so the
            # hang-up ended a later turn: this message's own turn is not what was cut off.
            return False
        run = self.runner.get(task.id)
        if run is None and not task.status.state.terminal and self.handovers is not None:
            # Its run is in another process, or in none any more (that process died): wait
            # for what ends it, as for a run here below (runtime/handover.py).
            task = await self.handovers.settle(task, HANGUP_WAIT)
        elif run is not None and run.cancel_reason in RERUN_REASONS:
            # Its caller just hung up and the run is being cancelled: wait for the end it
            # records, then decide on it (holding the run now would only hear "canceled").
            with anyio.move_on_after(HANGUP_WAIT):
                await run.done.wait()
            task, _ = await self.store.get(task.id)
        state = task.status.state
        return state is TaskState.CANCELED and _reason(task) in RERUN_REASONS

    def cut_off(self, run: Run, task: Task, message_id: str) -> bool:
        """Whether a resend answered with ``run`` (from :meth:`claim`) saw its task, as it
        ended (``task``), cut off for a reason that reruns it: then the caller sends again
        (:meth:`claim` reruns it, once: the reclaim is atomic).

        Only for a stand-in (a run in another process, which this caller's hold does not keep
        alive): the first caller may hang up on that process after it told this one the run
        was going on (``settle``'s probe raced the hang-up), and a resend must not be answered
        "canceled (hang-up)" for another caller's hang-up. A run here is kept by this caller's
        own hold, as on one process."""
        if run.detach_reason != RESENT or task.status.state is not TaskState.CANCELED:
            return False
        if _reason(task) not in RERUN_REASONS:
            return False
        if any(m.role is Role.USER and m.message_id != message_id for m in task.history or ()):
            return False
        log.info("resend of message %r: its task %s, followed in another process, ended "
                 "canceled (%s); running the message again", message_id, task.id, _reason(task))
        return True

    def _answer(self, task: Task, pos: int, prior: PriorSend) -> tuple[Task, Run, int]:
        run = self.runner.get(task.id)
        if run is None:
            # Ended, or running in another process: holding a detached stand-in keeps nothing
            # alive and cancels nothing (as for a queued run).
            run = Run(task.id, task.context_id, RESENT)
        # Follow from where the first send's caller did: its answer is the first interrupted
        # or terminal status after that position (the same one, if the task has moved on).
        return task, run, min(prior.position, pos)

    async def confirm(self, owner: str, msg: Message, task_id: str) -> None:
        """Make this follow-up's claim, right before it is delivered (shielded and bounded).

        A failure is logged, not raised: the message is delivered all the same, and its claim
        lapses while pending (a resend meanwhile waits, then delivers it again).
        """
        with anyio.move_on_after(PENDING_WAIT, shield=True):
            try:
                await self.store.confirm_message(owner, msg.message_id, task_id)
            except ServerUnavailable as exc:  # the store is away: no traceback, rate-limited
                _outages.failed("confirm", "could not confirm the claim of message %r to task "
                                "%s: %s", msg.message_id, task_id, exc)
            except Exception:
                log.warning("could not confirm the claim of message %r to task %s",
                            msg.message_id, task_id, exc_info=True)

    async def release(self, owner: str, msg: Message, task_id: str) -> None:
        """Drop this send's claim (it failed before taking effect), shielded and bounded."""
        with anyio.move_on_after(PENDING_WAIT, shield=True):
            await self.store.release_message(owner, msg.message_id, task_id)
