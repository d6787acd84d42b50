"""Run an unchanged a2a-sdk ``AgentExecutor`` as this project's agent, of either generation.

Generations: a2a-sdk 1.x (protobuf types; extra ``a2a-sdk``) and 0.3 (pydantic types; what
Strands, BeeAI and CrewAI pin; extra ``a2a-sdk-03``) are one distribution, so one environment
holds one of them: the installed one is chosen (:func:`generation`). This module is the one
runner for both; each generation's conversion (:mod:`.a2a_sdk_convert`,
:mod:`.a2a_sdk03_convert`) turns its events, request context and card into ours and back, and
the event rules (:mod:`.a2a_sdk_events`) are shared.

``from_executor(executor)`` returns an agent whose every run calls ``executor.execute(context,
event_queue)`` with a2a-sdk's own ``RequestContext`` (the message, task and context ids, the
current task, the related tasks of ``referenceTaskIds``, the call context with the caller as its
user, tenant and requested extensions, the request metadata) and an event queue mapped onto the
run (:mod:`.a2a_sdk_events`). ``TaskUpdater`` works as usual on that queue.

The start. The runtime leaves a new task ``submitted`` (``reports_start``): the executor's first
``working``, with its message if it has one, is the run's start, as on a2a-sdk's own server (no
extra bare ``working`` before it); an executor silent for ``START_HOLD`` seconds, or whose first
event is something else, gets a bare ``working`` first (:mod:`.a2a_sdk_events`).

Interrupted tasks. When ``execute`` returns after ``input-required`` (or ``auth-required``),
the run waits for the caller's next message, as ``ctx.ask`` does (parked: not cancelled when its
callers leave, bounded by the input timeout and the cap on waiting runs), then calls ``execute``
again with that message and the current task.

Cancellation. A hang-up of an interactive run, CancelTask, the caller's deadline or shutdown
cancel the run's scope: ``execute`` is cancelled, the async generators it left suspended (a
model stream the framework stopped reading between two chunks) are closed
(:mod:`.run_generators`), then ``executor.cancel(context, queue)`` is called (shielded, at
most ``cancel_timeout`` seconds) as a2a-sdk's contract says (BeeAI's on a copy of the executor
per run, as its ``cancel`` would otherwise abort all its runs for good:
:func:`.a2a_sdk_frameworks.for_one_run`); what either enqueues from then on (typically its own
``canceled``) is dropped, counted and logged at DEBUG (expected, not a warning), and the task
is recorded ``canceled`` with the run's reason. ``execute`` runs as a task of the server
nursery so that an executor that ignores cancellation cannot hold its run: after
``cancel_grace`` seconds it is abandoned (logged, left in the server nursery;
:mod:`scoped_a2a.runtime.abandon`), the task is recorded canceled and the run's slot freed.

Errors. An exception from ``execute`` fails the task (the caller sees its type and an error id;
the server log has the text). An executor that returns without ending its task completes it.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import anyio

from ..protocol.errors import TaskNotFound
from ..protocol.principal import Principal
from ..protocol.types import Message, Task
from ..runtime.context import RunContext
from ..runtime.outcome import Outcome
from .base import AdaptedAgent
from .run_generators import RunGenerators, tracked

if TYPE_CHECKING:
    from .a2a_sdk_events import RunEventQueue

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


def generation() -> str:
    """The installed generation: ``"1.x"`` or ``"0.3"``; UnsupportedGeneration (one line:
    what is installed, what to do) for none or another."""
    found = installed_version()
    if found is None:
        raise UnsupportedGeneration(
            "a2a-sdk is not installed: pip install 'scoped-a2a[a2a-sdk]' (1.x), or "
            "'scoped-a2a[a2a-sdk-03]' for executors written for 0.3 (Strands, BeeAI, CrewAI)")
    major, _, rest = found.partition(".")
    if major == "1":
        return "1.x"
    if major == "0" and rest.split(".")[0] == "3":
        return "0.3"
    raise UnsupportedGeneration(
        f"a2a-sdk {found} is installed; this adapter runs executors of the 1.x generation "
        "(pip install 'a2a-sdk>=1.3,<2') or of 0.3 (pip install 'a2a-sdk>=0.3.9,<0.4')")


def check_installed() -> None:
    """Raise UnsupportedGeneration unless a generation this adapter runs is installed."""
    generation()


def conversion() -> ModuleType:
    """The installed generation's conversion module (it imports that generation's types)."""
    if generation() == "0.3":
        from . import a2a_sdk03_convert

        return a2a_sdk03_convert
    from . import a2a_sdk_convert

    return a2a_sdk_convert


def recognises(obj: object) -> bool:
    """True when ``obj`` is an a2a-sdk ``AgentExecutor`` instance (either generation: the
    class has one module path in both), a Strands ``A2AServer`` or a CrewAI ``Agent``
    (:mod:`.a2a_sdk_frameworks`); imports nothing new."""
    import sys

    from .a2a_sdk_frameworks import wraps_executor

    module = sys.modules.get("a2a.server.agent_execution")
    executor_type = getattr(module, "AgentExecutor", None)
    return (executor_type is not None and isinstance(obj, executor_type)) or wraps_executor(obj)


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
    reports_start = True
    """A new task is left ``submitted`` by the runtime: the executor's first ``working``
    (which may carry a message) is its start (:mod:`.a2a_sdk_events`)."""

    def __init__(
        self, executor: Any, *, card: Any = None, cancel_timeout: float = CANCEL_TIMEOUT,
        cancel_grace: float = CANCEL_GRACE,
    ) -> None:
        self._convert = conversion()
        self.generation: str = self._convert.GENERATION
        from a2a.server.agent_execution import AgentExecutor

        from .a2a_sdk_frameworks import for_one_run, unwrap

        executor, known_card = unwrap(executor)
        if card is None:
            card = known_card
        if not isinstance(executor, AgentExecutor):
            raise TypeError(f"from_executor() takes an a2a-sdk AgentExecutor, not "
                            f"{type(executor).__name__}")
        self.executor = executor
        self._for_one_run = for_one_run
        self.cancel_timeout = cancel_timeout
        self.cancel_grace = cancel_grace
        self._card = self._card_dict(card)
        self.__name__ = type(executor).__name__

    def card_fields(self) -> dict[str, Any]:
        return dict(self._card)

    async def run(self, ctx: RunContext) -> str | Outcome | Message | None:
        from .a2a_sdk_events import START_HOLD, RunEventQueue

        known = not ctx.new_task or not self._convert.TASK_BEFORE_STATUS
        queue = RunEventQueue(ctx, self._convert.to_event, known_task=known)
        if not ctx.start_pending:
            return await self._run(ctx, queue)
        reply: str | Outcome | Message | None = None
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(queue.start_after, START_HOLD)  # a silent executor's task: working
            try:
                reply = await self._run(ctx, queue)
            except Exception as exc:  # raised as is below, not in the task group's group
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            try:
                raise error
            finally:
                # Its traceback holds this frame: a local that held it would be a cycle (and
                # the run's frames with it) that only the cyclic collector frees.
                del error
        return reply

    async def _run(
        self, ctx: RunContext, queue: RunEventQueue,
    ) -> str | Outcome | Message | None:
        executor = self._for_one_run(self.executor)
        current = None if ctx.new_task else await ctx.read_task(ctx.task_id)
        request = await self._request_context(ctx, current)
        generators = RunGenerators()
        try:
            while True:  # one execute per message: the first, then each answer to a question
                try:
                    await ctx.run_abandonable(
                        functools.partial(tracked, generators,
                                          functools.partial(executor.execute, request, queue)),
                        cancel_grace=self.cancel_grace, on_cancel=generators.cancelled,
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
                queue.resume()
                request = await self._request_context(ctx, await ctx.read_task(ctx.task_id))
        except anyio.get_cancelled_exc_class():
            # Whether execute was running or the run waited for an answer: a2a-sdk's contract
            # is execute cancelled, then cancel() called with the request being served.
            queue.stop()
            # First what execute left suspended (a model stream: its connection closes now,
            # not when the garbage collector finds it), then cancel() as a2a-sdk's contract says.
            with anyio.move_on_after(self.cancel_grace, shield=True):
                await generators.close_suspended()
            await self._cancel(executor, ctx, request, queue)
            raise
        finally:
            if queue.dropped:
                log.warning("task %s: %d events the executor enqueued after its task ended "
                            "were dropped", ctx.task_id, queue.dropped)
            if queue.dropped_after_stop:
                # The executor answering the runtime's cancel (its own canceled): expected.
                log.debug("task %s: %d events enqueued after the run was stopped were "
                          "dropped", ctx.task_id, queue.dropped_after_stop)

    async def _cancel(self, executor: Any, ctx: RunContext, request: Any, queue: Any) -> None:
        """Call ``executor.cancel`` (shielded, bounded); its failure is logged, not raised.

        It gets the request with the task as stored now as ``current_task``, as a2a-sdk's own
        CancelTask does (Strands' ``cancel`` refuses a context without one); if the task
        cannot be read, the request ``execute`` was given."""
        with anyio.move_on_after(self.cancel_timeout, shield=True) as bounded:
            try:
                request = await self._request_context(ctx, await ctx.read_task(ctx.task_id))
            except Exception:
                log.debug("task %s: cancel() gets the request without the current task",
                          ctx.task_id, exc_info=True)
            try:
                await ctx.run_abandonable(
                    functools.partial(executor.cancel, request, queue),
                    cancel_grace=self.cancel_grace,
                    name=f"{self.__name__}.cancel for task {ctx.task_id}")
            except Exception:
                log.warning("%s.cancel raised for task %s", self.__name__, ctx.task_id,
                            exc_info=True)
        if bounded.cancelled_caught:
            log.warning("%s.cancel did not return within %.1f s for task %s", self.__name__,
                        self.cancel_timeout, ctx.task_id)

    async def _request_context(self, ctx: RunContext, current: Task | None) -> Any:
        """a2a-sdk's ``RequestContext`` (of the installed generation) for the run's current
        message; the related tasks are those of ``referenceTaskIds`` this caller may read."""
        related = []
        for task_id in ctx.message.reference_task_ids or ():
            try:
                related.append(await ctx.read_task(task_id))
            except TaskNotFound:
                continue  # another owner's task, or gone: the executor sees neither
        return self._convert.request_context(ctx, current, related, _user_type()(ctx.principal))

    def _card_dict(self, card: Any) -> dict[str, Any]:
        if card is None:
            return {}
        data = cast(dict[str, Any], self._convert.card_dict(card))
        return {key: data[key] for key in CARD_FIELDS if key in data}


def from_executor(
    executor: Any, *, card: Any = None, cancel_timeout: float = CANCEL_TIMEOUT,
    cancel_grace: float = CANCEL_GRACE,
) -> ExecutorAgent:
    """Serve ``executor`` (an a2a-sdk ``AgentExecutor`` of the installed generation, 1.x or
    0.3) as an agent of this project.

    ``executor`` may also be a Strands ``A2AServer`` or a CrewAI ``Agent``
    (:mod:`.a2a_sdk_frameworks`). ``card``: the executor's ``AgentCard`` (protobuf for 1.x,
    pydantic for 0.3) or its JSON dict (default: the card its framework knows); its name,
    description, skills and modes go on the served card. ``cancel_timeout``: seconds
    ``executor.cancel`` may take; ``cancel_grace``: seconds an executor that ignores
    cancellation is waited for before it is abandoned. Raises UnsupportedGeneration when
    neither generation is installed, TypeError when ``executor`` is not an executor.
    """
    return ExecutorAgent(executor, card=card, cancel_timeout=cancel_timeout,
                         cancel_grace=cancel_grace)
