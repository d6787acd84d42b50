"""Serve an agent in this process behind a :class:`~.proxy.FaultyProxy`: one context manager.

Cancellation: leaving the context (normally, by an error, or by cancellation) makes the proxy
vanish (every connection cut) and shuts the agent's server down with a 0.5 s grace period; runs
still going then are cancelled and recorded ``canceled`` with reason ``shutdown``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..runtime.context import Agent
from ..runtime.policy import RunPolicy
from ..server.app import A2AApp
from ..server.serve import serve
from .proxy import FOLLOWER_METHODS, FaultyProxy, OnFault, listen


@asynccontextmanager
async def faulty_agent(
    agent: Agent,
    fault: str | None,
    *,
    methods: Iterable[str] = FOLLOWER_METHODS,
    card: dict[str, Any] | None = None,
    policy: RunPolicy | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    fault_rate: float = 0.05,
    seed: int | None = None,
    on_fault: OnFault | None = None,
    grace: float = 0.5,
) -> AsyncIterator[tuple[str, FaultyProxy, A2AApp]]:
    """Serve ``agent`` behind a fault-injecting proxy; yield ``(proxy URL, proxy, app)``.

    The agent's server listens on a free loopback port; the proxy on ``host:port`` (0: a free
    port), and the agent card advertises the proxy's URL, so a client that reads the card keeps
    going through the proxy. ``fault`` and the other options are :class:`FaultyProxy`'s; the
    ``"gone"`` fault asks the app's store whether a task has ended.
    """
    listener = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{listener.getsockname()[1]}/"
    app = A2AApp(agent, public_url=url, card=card, policy=policy, grace=grace)

    async def task_ended(task_id: str) -> bool:
        task, _ = await app.store.get(task_id)
        return task.status.state.terminal

    shutdown = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            upstream: int = await tg.start(lambda task_status: serve(
                app, host="127.0.0.1", port=0, shutdown=shutdown, grace=grace,
                task_status=task_status))
            proxy = FaultyProxy(upstream, fault, methods=methods, task_ended=task_ended,
                                fault_rate=fault_rate, seed=seed, on_fault=on_fault)
            tg.start_soon(proxy.serve_socket, listener)
            try:
                yield url, proxy, app
            finally:
                proxy.vanish()
                shutdown.set()
    finally:
        listener.close()  # already closed by serve_socket, unless the server failed to start
