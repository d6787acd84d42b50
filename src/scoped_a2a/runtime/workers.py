"""Tasks of the server nursery that execute runs, one after another: a run's start wakes an idle
one instead of spawning a task.

Why: spawning a task in an anyio task group costs more than a short run itself (anyio gives every
task a handle with its own cancel scope and event, a wrapper coroutine and its book-keeping: about
a tenth of a blocking send's CPU, measured in docs/benchmarks.md). Waking a task that waits is a
fraction of that.

What stays as it was. Every run still executes in a task of the server nursery (the ownership
tree of docs/design.md is unchanged): a worker is such a task, and it executes one run at a time,
to its end. Each run executes in a copy of the context of the caller that started it, taken at
the start, exactly what a task spawned there would have: a run sees its request's context
variables, and nothing a run sets is seen by the next run on the same worker (each step of the
run's coroutine is taken inside its own context, ``Context.run``). Cancel scopes the run enters
are entered and left in the worker's task, within the run, as they would be in a task of its own.

Cancellation. The nursery's cancellation reaches the run a worker is executing, as it would reach
a task of its own. A worker cancelled while idle ends; one cancelled just as it was handed a run
still executes that run (which is then cancelled at its first wait and records its end, as a run
spawned into a cancelled nursery does) before it ends. Errors: an exception a run lets out ends
its worker and reaches the nursery, as a spawned task's would. Idle workers end when the runner
shuts down (:meth:`RunWorkers.stop`), so the nursery can close; at most ``max_idle`` wait.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import anyio
from anyio.abc import TaskGroup

MAX_IDLE = 256
"""Idle workers kept for the next runs (each is a task waiting: about 2 KiB)."""

IDLE_NAME = "scoped_a2a run worker (idle)"
"""An idle worker's task name: between runs it is not the last run's (a task dump or a
debugger would blame a run that has ended)."""


class _Worker:
    __slots__ = ("job", "name", "wake")

    def __init__(self) -> None:
        self.job: tuple[Coroutine[Any, Any, Any], contextvars.Context] | None = None
        self.name = ""
        self.wake: anyio.Event | None = None


def _renamer() -> Callable[[str], None]:
    """What sets the current task's name (the one ``anyio.get_current_task().name``, trio's
    and asyncio's task lists and their debuggers show), found once per worker."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no asyncio loop runs: trio
        task = None
    if task is not None:
        return task.set_name
    import trio  # (only where trio runs)

    trio_task = trio.lowlevel.current_task()

    def rename(name: str) -> None:
        trio_task.name = name

    return rename


class RunWorkers:
    """Executes coroutines in tasks of ``nursery``, reusing tasks that have finished one.

    Lives on one event loop; ``start`` and ``stop`` are synchronous and never checkpoint.
    """

    def __init__(self, nursery: TaskGroup, max_idle: int = MAX_IDLE) -> None:
        self._nursery = nursery
        self._max_idle = max_idle
        self._idle: list[_Worker] = []
        self._stopped = False

    @property
    def idle(self) -> int:
        """How many workers wait for a run now."""
        return len(self._idle)

    def start(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Execute ``coro`` in a task of the nursery, in a copy of the current context.

        ``name``: the task's name while it executes ``coro`` (a new task's, or an idle
        worker's, renamed for this run; between runs a worker is named :data:`IDLE_NAME`).
        Raises what ``start_soon`` raises (a closed nursery), closing ``coro``.
        """
        job = (coro, contextvars.copy_context())
        if self._idle:
            worker = self._idle.pop()
            worker.job, worker.name = job, name
            assert worker.wake is not None
            worker.wake.set()
            return
        try:
            self._nursery.start_soon(self._work, job, name=name)
        except BaseException:
            coro.close()  # never started: no "never awaited" warning
            raise

    def stop(self) -> None:
        """End the idle workers, and each busy one once its run ends (shutdown: no run starts
        from now on). Calling it again changes nothing."""
        self._stopped = True
        idle, self._idle = self._idle, []
        for worker in idle:
            assert worker.wake is not None
            worker.wake.set()  # with no job: the worker ends

    async def _work(self, job: tuple[Coroutine[Any, Any, Any], contextvars.Context]) -> None:
        worker = _Worker()
        rename: Callable[[str], None] | None = None
        while True:
            await _InContext(*job)
            del job
            if self._stopped or len(self._idle) >= self._max_idle:
                return
            if rename is None:  # (found once the first run ends: a worker that ends never)
                rename = _renamer()
            rename(IDLE_NAME)
            worker.wake = wake = anyio.Event()
            self._idle.append(worker)
            try:
                await wake.wait()
            except BaseException:
                # Cancelled while idle (the nursery ends). A run handed over in the same
                # moment still executes: cancelled at its first wait, it records its end.
                handed, worker.job = worker.job, None
                if handed is None:
                    if worker in self._idle:  # (a list scan: only on the nursery's end)
                        self._idle.remove(worker)
                    raise
                rename(worker.name)
                await _InContext(*handed)
                raise
            if worker.job is None:
                return  # stopped
            job, worker.job = worker.job, None
            rename(worker.name)


class _InContext:
    """Awaits ``coro`` with each of its steps taken in ``context`` (``Context.run``), as a task
    created with that context steps its coroutine; what the event loop sends or throws in goes
    to the coroutine, what it yields goes to the event loop (as ``await`` delegates)."""

    __slots__ = ("_context", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        self._coro, self._context = coro, context

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, in_context = self._coro, self._context.run
        send, throw = coro.send, coro.throw
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                yielded = in_context(send, sent) if thrown is None else in_context(throw, thrown)
            except StopIteration as done:
                return done.value
            finally:
                sent = thrown = None
            try:
                sent = yield yielded
            except GeneratorExit:
                in_context(coro.close)
                raise
            except BaseException as exc:
                thrown = exc
