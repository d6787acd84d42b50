"""Runs execute in reused tasks of the server nursery (runtime/workers.py): what a task of its own
gave each run still holds.

A run sees the context of the caller that started it and nothing an earlier run on the same task
set; a run handed to an idle task while the nursery is cancelled, or while the run itself is
cancelled, still executes and records its end; an error a run lets out reaches the nursery; idle
tasks end at shutdown, so the nursery closes. On asyncio, trio, and trio's mock clock (where the
hand-off and the cancellation land in the same tick), and end to end through hypercorn.
"""

from __future__ import annotations

import contextvars
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from trio.testing import MockClock

from scoped_a2a import A2AApp, RunContext
from scoped_a2a.runtime.workers import IDLE_NAME, RunWorkers
from tests.helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


@pytest.fixture(params=["asyncio", "trio", "trio-mock-clock"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "trio-mock-clock":
        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return request.param


async def _ticks(n: int) -> None:
    for _ in range(n):
        await anyio.lowlevel.checkpoint()


async def _idle(workers: RunWorkers, count: int) -> None:
    """Wait (within the test's deadline) until ``count`` tasks wait for a run."""
    while workers.idle != count:
        await anyio.sleep(0.001)


async def test_each_run_sees_its_starters_context_and_no_earlier_runs() -> None:
    seen: list[tuple[str, object]] = []

    async def job(label: str) -> None:
        seen.append((VAR.get(), anyio.get_current_task().id))
        VAR.set(f"set by {label}")
        await anyio.lowlevel.checkpoint()
        seen.append((VAR.get(), anyio.get_current_task().id))

    async with anyio.create_task_group() as tg:
        workers = RunWorkers(tg)
        VAR.set("first caller")
        workers.start(job("first"), name="w")
        await _ticks(5)
        assert workers.idle == 1, "the task that ran the first job waits for the next"
        VAR.set("second caller")
        workers.start(job("second"), name="w")
        await _ticks(5)
        assert VAR.get() == "second caller", "a run's own settings stay in its context"
        workers.stop()
    (a, task1), (a2, _), (b, task2), (b2, _) = seen
    assert task1 == task2, f"the second job did not reuse the task: {seen}"
    assert (a, a2) == ("first caller", "set by first"), seen
    assert (b, b2) == ("second caller", "set by second"), seen


async def test_a_reused_task_takes_each_runs_name() -> None:
    """A run's task is named after the run (``scoped_a2a run <task id>`` in the runner), also
    when an idle task executes it: the name a debugger or the task list shows is the run's."""
    seen: list[tuple[str, int]] = []

    async def job() -> None:
        task = anyio.get_current_task()
        seen.append((task.name, task.id))
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        workers = RunWorkers(tg)
        for name in ("run a", "run b", "run c"):
            workers.start(job(), name=name)
            await _ticks(5)
        workers.stop()
    assert [name for name, _ in seen] == ["run a", "run b", "run c"], seen
    assert len({task for _, task in seen}) == 1, f"the task was not reused: {seen}"


async def test_a_task_waiting_for_a_run_drops_the_last_runs_name() -> None:
    """Between runs a reused task is named as idle, not after the run it executed last: a task
    dump or a debugger would otherwise blame a run that has ended."""
    names: list[str] = []

    async def job() -> None:
        names.append(anyio.get_current_task().name)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        workers = RunWorkers(tg)
        workers.start(job(), name="run a")
        await _idle(workers, 1)
        idle = _names_of_children()
        workers.start(job(), name="run b")
        await _idle(workers, 1)
        idle_again = _names_of_children()
        workers.stop()
    assert names == ["run a", "run b"], names
    assert idle == [IDLE_NAME] and idle_again == [IDLE_NAME], (idle, idle_again)


def _names_of_children() -> list[str]:
    """The names of the running tasks the current task's task groups hold."""
    own = anyio.get_current_task().id
    return sorted(str(task.name) for task in anyio.get_running_tasks() if task.parent_id == own)


@pytest.mark.parametrize("ticks", [-1, 0, 1, 2, 3])
async def test_a_run_handed_over_as_the_nursery_is_cancelled_still_executes(ticks: int) -> None:
    """The nursery's cancellation lands 0-3 ticks after the hand-off to an idle task, or (-1)
    just before it, when the idle task has been cancelled but has not run yet: the job starts
    in every case and is cancelled at its first wait (its ``finally`` runs, where a run records
    its end), as a task spawned into a cancelled nursery would be."""
    events: list[str] = []

    async def job(label: str) -> None:
        events.append(f"{label} began")
        try:
            await anyio.sleep(10)
        finally:
            events.append(f"{label} ended")

    async def quick() -> None:
        events.append("quick")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            workers = RunWorkers(tg)
            workers.start(quick(), name="w")
            await _idle(workers, 1)
            if ticks < 0:
                tg.cancel_scope.cancel()
            workers.start(job("handed"), name="w")
            assert workers.idle == 0, "handed to the idle task, not to a new one"
            if ticks >= 0:
                await _ticks(ticks)
                tg.cancel_scope.cancel()
    assert events == ["quick", "handed began", "handed ended"], events


@pytest.mark.parametrize("ticks", range(4))
async def test_a_run_cancelled_as_it_is_handed_over_leaves_the_task_clean(ticks: int) -> None:
    """A run's own cancel scope cancelled 0-3 ticks after the hand-off: the run ends cancelled,
    and the next run on the same task is not (no cancellation is left behind in the task)."""
    events: list[str] = []
    scope = anyio.CancelScope()

    async def cancellable() -> None:
        with scope:
            events.append("began")
            await anyio.sleep(10)
        events.append(f"cancelled={scope.cancelled_caught}")

    async def after() -> None:
        await anyio.sleep(0.01)
        events.append(f"next ran, task {anyio.get_current_task().id}")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            workers = RunWorkers(tg)
            workers.start(after(), name="w")
            await _idle(workers, 1)
            workers.start(cancellable(), name="w")
            await _ticks(ticks)
            scope.cancel()
            await _idle(workers, 1)
            workers.start(after(), name="w")
            await _idle(workers, 1)
            workers.stop()
    assert events[1:3] == ["began", "cancelled=True"], events
    assert events[0] == events[3], f"not one task for all three: {events}"


async def test_an_error_a_run_lets_out_reaches_the_nursery() -> None:
    async def broken() -> None:
        await anyio.lowlevel.checkpoint()
        raise ValueError("boom")

    async def quick() -> None:
        pass

    with pytest.raises(BaseException) as caught:  # an ExceptionGroup
        async with anyio.create_task_group() as tg:
            workers = RunWorkers(tg)
            workers.start(quick(), name="w")
            await _ticks(5)
            workers.start(broken(), name="w")
            await anyio.sleep(1)
    assert "boom" in repr(caught.value), repr(caught.value)


async def test_idle_tasks_end_at_stop_and_the_nursery_closes() -> None:
    async def quick() -> None:
        await anyio.lowlevel.checkpoint()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            workers = RunWorkers(tg)
            for _ in range(3):
                workers.start(quick(), name="w")
            await _ticks(5)
            assert workers.idle == 3
            before = len(anyio.get_running_tasks())
            workers.stop()
            await _ticks(5)
            assert len(anyio.get_running_tasks()) == before - 3
            workers.start(quick(), name="w")  # after stop: runs, then its task ends
            await _ticks(5)
            assert workers.idle == 0


async def test_sends_reuse_run_tasks_without_sharing_context(anyio_backend: Any) -> None:
    """End to end: sequential blocking sends run on one reused task of the nursery, and what
    one run's agent sets in its context is not seen by the next."""
    if anyio_backend != "asyncio" and anyio_backend != "trio":
        pytest.skip("real sockets: not under the mock clock")
    seen: list[tuple[str, object]] = []

    async def agent(ctx: RunContext) -> str:
        seen.append((VAR.get(), anyio.get_current_task().id))
        VAR.set(ctx.task_id)
        return "ok"

    app = A2AApp(agent)
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        for i in range(3):
            body = await rpc(client, url, "SendMessage", {"message": text_message(f"m{i}")})
            assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
        assert app.runner.idle_workers >= 1
    assert [value for value, _ in seen] == ["unset"] * 3, seen
    assert len({task for _, task in seen}) < 3, f"no run task was reused: {seen}"


async def test_no_task_is_named_after_a_run_that_has_ended(anyio_backend: Any) -> None:
    """End to end: once blocking sends are answered, the server's tasks waiting for the next
    run are named as idle; none is named after a task whose run ended."""
    if anyio_backend != "asyncio" and anyio_backend != "trio":
        pytest.skip("real sockets: not under the mock clock")

    async def agent(ctx: RunContext) -> str:
        return "ok"

    app = A2AApp(agent)
    ended: list[str] = []
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        for i in range(3):
            body = await rpc(client, url, "SendMessage", {"message": text_message(f"m{i}")})
            assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", body
            ended.append(body["result"]["task"]["id"])
        with anyio.fail_after(5):
            while app.runner.idle_workers < 1:  # the last run's task goes idle after answering
                await anyio.sleep(0.01)
        names = [str(task.name) for task in anyio.get_running_tasks()]
    blamed = [name for name in names if any(task_id in name for task_id in ended)]
    assert not blamed, f"tasks named after ended runs: {blamed}"
    assert IDLE_NAME in names, f"no idle run task among {sorted(names)[:20]}"
