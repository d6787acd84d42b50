"""Exceptions handed from one place to another (stored, then raised again) must not be left in
reference cycles for the cyclic collector: a kept exception's traceback holds the frames it
passed through, and a frame that holds the exception again (a local, a result object, a list of
answers) makes a cycle. Everything those frames hold (a batch of writes with their event bodies,
a run's context) then waits for the collector, which 3.13 runs after 2,000 new objects (3.11:
700); on 3.12+ a finished frame also keeps its caller as ``f_back``.

Each test runs one error path with the collector off and in DEBUG_SAVEALL mode, then collects:
nothing of the path's exception may be found only by the collector. The SQLite writer (a write
refused by a constraint; an op whose ``done`` raised), ``run_abandonable`` (the abandonable
function raised), and the a2a-sdk adapter (an executor that raised, end to end over HTTP).
"""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import anyio
import pytest

from scoped_a2a.runtime.abandon import run_abandonable
from scoped_a2a.runtime.failures import AgentError
from scoped_a2a.store.sqlite.writer import Work, Writer

pytestmark = pytest.mark.anyio


class Boom(Exception):
    """The error of the path under test (its own type: found among the collector's finds)."""


@contextmanager
def collector_off() -> Iterator[list[Any]]:
    """With the collector off; on exit, what only the collector could free is in the list."""
    found: list[Any] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
    finally:
        gc.collect()
        found.extend(gc.garbage)
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def of_type(found: list[Any], *types: type) -> list[str]:
    return [f"{type(o).__name__}: {o}"[:200] for o in found if isinstance(o, types)]


async def test_run_abandonable_leaves_no_cycle_when_its_function_raises() -> None:
    async def boom() -> None:
        raise Boom("the abandonable function failed")

    async with anyio.create_task_group() as nursery:
        with collector_off() as found:
            try:
                await run_abandonable(nursery, boom, cancel_grace=1.0, name="boom")
            except Boom:
                pass
            else:
                pytest.fail("run_abandonable did not raise the function's error")
    assert of_type(found, Boom) == [], "left to the cycle collector"


@pytest.fixture
def writer_conn(tmp_path: Any) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(tmp_path / "w.sqlite", check_same_thread=False,
                           isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    yield conn
    conn.close()


async def test_the_sqlite_writer_leaves_no_cycle_for_a_refused_write(
        writer_conn: sqlite3.Connection) -> None:
    writer = Writer(writer_conn, "w.sqlite")
    insert = Work(run=lambda conn: conn.execute("INSERT INTO t VALUES (1)").rowcount)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        assert await writer.write(insert) == 1
        with collector_off() as found:
            try:
                await writer.write(insert)  # the same id again: refused by the constraint
            except sqlite3.IntegrityError:
                pass
            else:
                pytest.fail("a duplicate insert was not refused")
        writer.close()
    assert of_type(found, sqlite3.IntegrityError) == [], "left to the cycle collector"


async def test_the_sqlite_writer_leaves_no_cycle_when_done_raises(
        writer_conn: sqlite3.Connection) -> None:
    writer = Writer(writer_conn, "w.sqlite")

    def done(result: object) -> None:
        raise Boom("done failed")

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        with collector_off() as found:
            try:
                await writer.write(Work(run=lambda conn: 1, done=done))
            except Boom:
                pass
            else:
                pytest.fail("done's error was not raised")
        writer.close()
    assert of_type(found, Boom) == [], "left to the cycle collector"


class BoomAgentError(AgentError):
    """An executor's failure that the runner logs without a traceback (so pytest's log capture
    does not keep the exception alive, which would hide a cycle)."""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a2a-sdk executors are asyncio-bound
async def test_the_a2a_sdk_adapter_leaves_no_cycle_when_the_executor_raises() -> None:
    pytest.importorskip("a2a.server.agent_execution")
    import httpx
    from a2a.server.agent_execution import AgentExecutor

    from scoped_a2a import A2AApp
    from scoped_a2a.adapters.a2a_sdk import from_executor

    from .helpers import rpc, served, text_message

    class Raising(AgentExecutor):
        async def execute(self, context: Any, event_queue: Any) -> None:
            raise BoomAgentError("the executor failed")

        async def cancel(self, context: Any, event_queue: Any) -> None:
            pass

    async with served(A2AApp(from_executor(Raising()))) as url, \
            httpx.AsyncClient(timeout=10) as client:
        send = partial(rpc, client, url, "SendMessage")
        await send({"message": text_message("warm up")})  # imports, first-run caches
        with collector_off() as found:
            body = await send({"message": text_message("fail")})
        assert body["result"]["task"]["status"]["state"] == "TASK_STATE_FAILED", body
    assert of_type(found, BoomAgentError) == [], "left to the cycle collector"
