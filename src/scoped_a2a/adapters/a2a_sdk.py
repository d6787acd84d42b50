"""Run an unchanged a2a-sdk ``AgentExecutor`` as this project's agent (extra ``a2a-sdk``).

``from_executor(executor)`` returns an agent whose every run calls ``executor.execute(context,
event_queue)`` with a2a-sdk's own ``RequestContext`` (the message, task and context ids, the
current task, the related tasks of ``referenceTaskIds``, the call context with the caller as its
user, tenant and requested extensions, the request metadata) and an event queue mapped onto the
run (:mod:`.a2a_sdk_events`). ``TaskUpdater`` works as usual on that queue.

Interrupted tasks. When ``execute`` returns after ``input-required`` (or ``auth-required``),
the run waits for the caller's next message, as ``ctx.ask`` does (parked: not cancelled when its
callers leave, bounded by the input timeout and the cap on waiting runs), then calls ``execute``
again with that message and the current task.

Cancellation. A hang-up of an interactive run, CancelTask, the caller's deadline or shutdown
cancel the run's scope: ``execute`` is cancelled, then ``executor.cancel(context, queue)`` is
called (shielded, at most ``cancel_timeout`` seconds) as a2a-sdk's contract says; what either
enqueues from then on is dropped and counted, and the task is recorded ``canceled`` with the
run's reason. ``execute`` runs as a task of the server nursery so that an executor that ignores
cancellation cannot hold its run: after ``cancel_grace`` seconds it is abandoned (logged, left in
the server nursery; :mod:`scoped_a2a.runtime.abandon`), the task is recorded canceled and the
run's slot freed.

Errors. An exception from ``execute`` fails the task (the caller sees its type and an error id;
the server log has the text). An executor that returns without ending its task completes it.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio

from ..protocol.errors import TaskNotFound
from ..protocol.principal import Principal
from ..protocol.types import Message
from ..runtime.context import RunContext
from ..runtime.outcome import Outcome
from .base import AdaptedAgent

log = logging.getLogger("scoped_a2a.adapters")

CANCEL_TIMEOUT = 5.0
"""Seconds ``executor.cancel()`` may take (shielded) once its run is cancelled."""

CANCEL_GRACE = 2.0
"""Seconds an ``execute`` (or ``cancel``) that ignores cancellation is waited for before it is
abandoned."""

CARD_FIELDS = ("name", "description", "version", "skills", "defaultInputModes",
               "defaultOutputModes", "provider", "documentationUrl", "iconUrl")
"""What an executor's own card may set on ours (interfaces, URL and capabilities stay ours)."""


class UnsupportedGeneration(RuntimeError):
    """The installed a2a-sdk is not a generation this adapter runs."""


def installed_version() -> str | None:
    try:
        return version("a2a-sdk")
    except PackageNotFoundError:
        return None


def check_installed() -> None:
    """Raise UnsupportedGeneration (one line: which is installed, what to do) unless a2a-sdk
    1.x, the protobuf generation, is importable."""
    found = installed_version()
    if found is None:
        raise UnsupportedGeneration(
            "a2a-sdk is not installed: pip install 'scoped-a2a[a2a-sdk]'")
    major = found.split(".")[0]
    if major != "1":
        raise UnsupportedGeneration(
            f"a2a-sdk {found} is installed; this adapter runs executors of the 1.x generation "
            "(protobuf types): pip install 'a2a-sdk>=1.3,<2' (an executor written for 0.3's "
            "pydantic types can enqueue a2a.compat.v0_3.types events, which are converted)")


def recognises(obj: object) -> bool:
    """True when ``obj`` is an a2a-sdk ``AgentExecutor`` instance; imports nothing new (an
    executor's module has imported a2a-sdk already)."""
    import sys

    module = sys.modules.get("a2a.server.agent_execution")
    executor_type = getattr(module, "AgentExecutor", None)
    return executor_type is not None and isinstance(obj, executor_type)


@functools.cache
def _user_type() -> type:
    """a2a-sdk's ``User`` for a principal: authenticated unless anonymous, named by its id
    (made on first use: a2a-sdk is imported only when an executor is served)."""
    from a2a.auth.user import User

    class CallerUser(User):
        def __init__(self, principal: Principal) -> None:
            self.principal = principal

        @property
        def is_authenticated(self) -> bool:
            return not self.principal.anonymous

        @property
        def user_name(self) -> str:
            return self.principal.id

    return CallerUser


class ExecutorAgent(AdaptedAgent):
    """An a2a-sdk ``AgentExecutor`` served here (see the module docstring)."""

    framework = "a2a-sdk's AgentExecutor"

    def __init__(
        self, executor: Any, *, card: Any = None, cancel_timeout: float = CANCEL_TIMEOUT,
        cancel_grace: float = CANCEL_GRACE,
    ) -> None:
        check_installed()
        from a2a.server.agent_execution import AgentExecutor

        if not isinstance(executor, AgentExecutor):
            raise TypeError(f"from_executor() takes an a2a-sdk AgentExecutor, not "
                            f"{type(executor).__name__}")
        self.executor = executor
        self.cancel_timeout = cancel_timeout
        self.cancel_grace = cancel_grace
        self._card = _card_dict(card)
        self.__name__ = type(executor).__name__

    def card_fields(self) -> dict[str, Any]:
        return dict(self._card)

    async def run(self, ctx: RunContext) -> str | Outcome | Message | None:
        from .a2a_sdk_events import RunEventQueue

        queue = RunEventQueue(ctx, known_task=not ctx.new_task)
        current = None if ctx.new_task else await ctx.read_task(ctx.task_id)
        request = await self._request_context(ctx, current)
        try:
            while True:  # one execute per message: the first, then each answer to a question
                try:
                    await ctx.run_abandonable(
                        functools.partial(self.executor.execute, request, queue),
                        cancel_grace=self.cancel_grace,
                        name=f"{self.__name__}.execute for task {ctx.task_id}")
                except Exception:
                    if (failure := queue.failure()) is not None:
                        return failure  # it raised the broken rule we raised into it
                    raise
                if (failure := queue.failure()) is not None:
                    return failure
                if queue.reply is not None:
                    return queue.reply  # a direct reply: the caller gets the message, no task
                if queue.outcome is not None:
                    return queue.outcome
                if not queue.interrupted:
                    return None  # returned without ending its task: completed
                await ctx.next_input()
                queue.interrupted = False
                request = await self._request_context(ctx, await ctx.read_task(ctx.task_id))
        except anyio.get_cancelled_exc_class():
            # Whether execute was running or the run waited for an answer: a2a-sdk's contract
            # is execute cancelled, then cancel() called with the request being served.
            queue.close()
            await self._cancel(ctx, request, queue)
            raise
        finally:
            if queue.dropped:
                log.warning("task %s: %d events the executor enqueued after the end were "
                            "dropped", ctx.task_id, queue.dropped)

    async def _cancel(self, ctx: RunContext, request: Any, queue: Any) -> None:
        """Call ``executor.cancel`` (shielded, bounded); its failure is logged, not raised."""
        with anyio.move_on_after(self.cancel_timeout, shield=True) as bounded:
            try:
                await ctx.run_abandonable(
                    functools.partial(self.executor.cancel, request, queue),
                    cancel_grace=self.cancel_grace,
                    name=f"{self.__name__}.cancel for task {ctx.task_id}")
            except Exception:
                log.warning("%s.cancel raised for task %s", self.__name__, ctx.task_id,
                            exc_info=True)
        if bounded.cancelled_caught:
            log.warning("%s.cancel did not return within %.1f s for task %s", self.__name__,
                        self.cancel_timeout, ctx.task_id)

    async def _request_context(self, ctx: RunContext, current: Any) -> Any:
        """a2a-sdk's ``RequestContext`` for the run's current message."""
        from a2a.server.agent_execution import RequestContext
        from a2a.server.context import ServerCallContext
        from a2a.types import a2a_pb2 as pb

        from .a2a_sdk_convert import message_to_proto, task_to_proto

        related = []
        for task_id in ctx.message.reference_task_ids or ():
            try:
                related.append(task_to_proto(await ctx.read_task(task_id)))
            except TaskNotFound:
                continue  # another owner's task, or gone: the executor sees neither
        request = pb.SendMessageRequest(message=message_to_proto(ctx.message))
        if ctx.request_metadata:
            request.metadata.update(ctx.request_metadata)
        call = ServerCallContext(
            user=_user_type()(ctx.principal),
            tenant=ctx.tenant,
            requested_extensions=set(ctx.message.extensions or ()),
            state={"principal": ctx.principal, "claims": dict(ctx.principal.claims)},
        )
        return RequestContext(
            call_context=call, request=request, task_id=ctx.task_id, context_id=ctx.context_id,
            task=task_to_proto(current) if current is not None else None, related_tasks=related)


def _card_dict(card: Any) -> dict[str, Any]:
    if card is None:
        return {}
    if not isinstance(card, dict):
        from google.protobuf import json_format

        card = json_format.MessageToDict(card)
    return {key: card[key] for key in CARD_FIELDS if key in card}


def from_executor(
    executor: Any, *, card: Any = None, cancel_timeout: float = CANCEL_TIMEOUT,
    cancel_grace: float = CANCEL_GRACE,
) -> ExecutorAgent:
    """Serve ``executor`` (an a2a-sdk 1.x ``AgentExecutor``) as an agent of this project.

    ``card``: the executor's ``AgentCard`` (protobuf) or its JSON dict; its name, description,
    skills and modes go on the served card. ``cancel_timeout``: seconds ``executor.cancel`` may
    take; ``cancel_grace``: seconds an executor that ignores cancellation is waited for before
    it is abandoned. Raises UnsupportedGeneration when a2a-sdk 1.x is not installed, TypeError
    when ``executor`` is not an ``AgentExecutor``.
    """
    return ExecutorAgent(executor, card=card, cancel_timeout=cancel_timeout,
                         cancel_grace=cancel_grace)
