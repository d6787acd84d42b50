"""scoped_a2a.testing, as a user sees it: its faults, in front of an agent served anywhere.

The step/follower tests (test_client_misbehaving.py, test_client_race.py) use faulty_agent with
the "close", "500", "404" and "hang" faults and vanish(); here: "gone", "random", a proxy in
front of an agent it did not start, and the errors a wrong fault gives.
"""

from __future__ import annotations

import anyio
import pytest

from scoped_a2a import A2AApp, A2AClient, Task, TaskState, serve
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.client import TransportError
from scoped_a2a.testing import FaultyProxy, faulty_agent

pytestmark = pytest.mark.anyio


async def test_gone_fault_answers_while_the_task_runs_then_closes() -> None:
    async with faulty_agent(demo_agent, "gone") as (url, proxy, _app), A2AClient(url) as client:
        task = await client.send("slow 1", return_immediately=True)
        assert isinstance(task, Task)
        page = await client.read_trajectory(task.id)  # running: forwarded
        assert page.state is not None
        assert proxy.faulty_requests == []
        with anyio.fail_after(10):
            while not (await client.get_task(task.id)).status.state.terminal:
                await anyio.sleep(0.05)
        with pytest.raises(TransportError):
            await client.read_trajectory(task.id)  # ended: the agent is gone
    assert len(proxy.faulty_requests) == 1


async def test_random_fault_reports_each_fault_and_ends_follower_reads() -> None:
    seen: list[tuple[str | None, str | None]] = []
    async with faulty_agent(demo_agent, "random", fault_rate=0.0, seed=1,
                            on_fault=lambda method, task: seen.append((method, task))) as (
            url, proxy, _app), A2AClient(url) as client:
        task = await client.send("hello")
        assert isinstance(task, Task) and task.status.state == TaskState.COMPLETED
        await client.read_trajectory(task.id)  # sets this task's moment, 0-0.6 s ahead
        with anyio.fail_after(10):
            while True:
                try:
                    await client.read_trajectory(task.id)
                except TransportError:
                    break
                await anyio.sleep(0.05)
    assert seen and all(t == task.id for _, t in seen)
    assert len(proxy.faulty_requests) == len(seen)


async def test_proxy_in_front_of_an_agent_it_did_not_start() -> None:
    app = A2AApp(demo_agent)
    shutdown = anyio.Event()
    async with anyio.create_task_group() as tg:
        upstream = await tg.start(lambda task_status: serve(
            app, host="127.0.0.1", port=0, shutdown=shutdown, grace=0.5,
            task_status=task_status))
        proxy = FaultyProxy(upstream, "500", methods={"GetTask"})
        port = await tg.start(proxy.serve)
        # The card advertises the agent's own URL: pin the client to the proxy's.
        proxy_url = f"http://127.0.0.1:{port}/"
        async with A2AClient(proxy_url, rpc_url=proxy_url) as c:
            task = await c.send("hello")  # forwarded
            assert isinstance(task, Task) and task.status.state == TaskState.COMPLETED
            with pytest.raises(TransportError):
                await c.get_task(task.id)  # answered 500 by the proxy
        proxy.vanish()  # the port closes as soon as the task serving it runs again
        with anyio.fail_after(5):
            while True:
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    break  # vanished: the port refuses connections
                await stream.aclose()
                await anyio.sleep(0.01)
        shutdown.set()
    assert len(proxy.faulty_requests) == 1


def test_wrong_fault_says_what_to_choose() -> None:
    with pytest.raises(ValueError, match="unknown fault 'boom'; choose one of close"):
        FaultyProxy(1, "boom")
    with pytest.raises(ValueError, match="needs task_ended"):
        FaultyProxy(1, "gone")
