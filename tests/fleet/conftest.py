"""Fixtures of the fleet tests: replicas of ``serve`` over a shared store, Redis or PostgreSQL.

``fleet`` is parametrized by store: each test runs once over a real ``redis-server`` and once
over a real PostgreSQL (a fresh database on the session's server), on the test's backend. The
tests whose assertions are the same for both stores live here, once (they were written twice,
in tests/redis and tests/postgres). A store that is not installed skips its half, saying so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..redis.conftest import AGENT, REDIS_SERVER, Proc, RedisServer


@dataclass
class Fleet:
    """Replicas over one store: :meth:`serve` starts one, :meth:`store` opens it here."""

    kind: str  # "redis" | "postgres"
    url: str
    tmp: Path
    backend: str
    procs: list[Proc] = field(default_factory=list)

    def serve(self, *args: str, command: str = "serve", workers: int = 0) -> Proc:
        """A ``serve`` (or ``worker``) process over the store; ``AGENT`` unless ``args`` name
        one; stopped at the end of the test."""
        log = self.tmp / f"{command}-{len(self.procs)}.log"
        if "--agent" not in args:
            args = ("--agent", AGENT, *args)
        if command == "serve":
            args = ("--port", "0", *args)
        if workers:
            args = ("--workers", str(workers), *args)
        if self.kind == "postgres":
            args = ("--postgres-key-file", str(self.tmp / "push.key"), *args)
        proc = Proc([command, "--backend", self.backend, "--store", self.url,
                     "--log-level", "INFO", *args], log)
        self.procs.append(proc)
        return proc

    def store(self, **options: Any) -> AbstractAsyncContextManager[Any]:
        """The store, opened in the test's own process (to read what the replicas wrote)."""
        return _open(self, **options)


@asynccontextmanager
async def _open(fleet: Fleet, **options: Any) -> AsyncIterator[Any]:
    if fleet.kind == "redis":
        from scoped_a2a.store.redis import open_redis_store

        async with open_redis_store(fleet.url, **options) as store:
            yield store
    else:
        from scoped_a2a.store.postgres import open_postgres_store

        async with open_postgres_store(fleet.url, key_file=fleet.tmp / "push.key",
                                       **options) as store:
            yield store


PAIRS = {("redis", "asyncio"), ("postgres", "trio")}
"""The (store, backend) pairs a test marked ``pairs`` runs on: each store and each backend
once, half the runs (the slowest real-process tests: suite time)."""


@pytest.fixture(params=["redis", "postgres"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
          ) -> Iterator[Fleet]:
    if (request.node.get_closest_marker("pairs") is not None
            and (request.param, anyio_backend) not in PAIRS):
        pytest.skip(f"runs on {sorted(PAIRS)} only (each store and each backend once: "
                    "suite time)")
    redis: RedisServer | None = None
    if request.param == "redis":
        if REDIS_SERVER is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server, "
                        "or scripts/install-system-deps)")
        redis = RedisServer(tmp_path)
        redis.start()
        url = redis.url
    else:
        from ..postgres.server import shared_server, skip_without_postgres

        skip_without_postgres()
        url = shared_server().database()
    fleet = Fleet(request.param, url, tmp_path, anyio_backend)
    try:
        yield fleet
    finally:
        for proc in fleet.procs:
            proc.stop()
        if redis is not None:
            redis.stop()


def states_of(received: list[Any]) -> dict[str, list[str]]:
    """Each task's delivered states, in order (a terminal state's payload is the task)."""
    out: dict[str, list[str]] = {}
    for r in received:
        body = r.json
        update = body.get("statusUpdate") or body.get("task") or {}
        task_id = update.get("taskId") or update.get("id")
        out.setdefault(task_id, []).append(update["status"]["state"])
    return out


Starter = Callable[..., Proc]


async def watched_states(fleet: Fleet) -> dict[str, str]:
    """Each push watch's recorded state, by task id, as the store holds it
    (store/push_watches.py): what an adopter would resume from."""
    async with fleet.store() as store:
        if fleet.kind == "redis":
            raw = await store.conn.client.hgetall(f"{store.keys.base}pushw:at")
            return {bytes(k).decode().split("\n")[0]: bytes(v).decode().split("\n")[1]
                    for k, v in raw.items()}
        rows = await store.pool.query(
            "SELECT t.id, p.state FROM push p JOIN tasks t ON t.seq = p.task")
        return {str(t): str(s) for t, s in rows}
