"""scoped-a2a's A2AApp under uvicorn (it is a plain ASGI app; its lifespan opens the nursery).

On hypercorn the benchmarks use the real command line, ``python -m scoped_a2a serve``; this script
is the uvicorn equivalent with the same options the benchmarks pass there. ``--store
redis://...`` (or ``sqlite:PATH``) keeps tasks in Redis (or an SQLite file) the way ``serve
--store`` does: the store, a worker and the server nursery live in the lifespan (uvicorn runs it
as one task for the server's whole life).
"""

from __future__ import annotations

from typing import Any

import anyio

from benchmarks.peers._serve import arguments, run
from scoped_a2a import A2AApp, RunPolicy
from scoped_a2a.agent_loading import load_agent
from scoped_a2a.server import gc_tuning
from scoped_a2a.store.memory import MemoryTaskStore


class OnRedis:
    """An ASGI app that opens a Redis (or SQLite) store in its lifespan and serves an A2AApp
    over it."""

    def __init__(self, url: str, make_app: Any) -> None:
        self.url = url
        self.make_app = make_app
        self.app: A2AApp | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            assert self.app is not None, "a request before the lifespan started"
            await self.app(scope, receive, send)
            return
        from scoped_a2a.runtime.durable_worker import Worker

        opened: Any
        if self.url.startswith("sqlite:"):
            from scoped_a2a.store.sqlite import open_sqlite_store

            path, _, query = self.url.removeprefix("sqlite:").partition("?")
            opened = open_sqlite_store(path, synchronous=query.partition("=")[2] or "full")
        elif self.url.startswith(("postgresql://", "postgres://")):
            from scoped_a2a.store.postgres import open_postgres_store

            opened = open_postgres_store(self.url)  # key file: $SCOPED_A2A_POSTGRES_KEY_FILE
        else:
            from scoped_a2a.store.redis import open_redis_store

            opened = open_redis_store(self.url)
        async with opened as store, anyio.create_task_group() as nursery:
            self.app = app = self.make_app(store, nursery)
            nursery.start_soon(Worker(store.queue, app.runner).run)
            await app(scope, receive, send)  # returns after lifespan.shutdown
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--agent", required=True)
    parser.add_argument("--detach-metadata", action="append", default=[])
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--store", default="memory")
    parser.add_argument("--max-ended-tasks", type=int, default=10_000)
    parser.add_argument("--no-gc-tuning", action="store_true")
    args = parser.parse_args()
    policy = RunPolicy.from_rules(args.detach_metadata)

    def make_app(store: Any = None, detached: Any = None) -> A2AApp:
        if store is None:
            store = MemoryTaskStore(max_ended_tasks=args.max_ended_tasks)
        return A2AApp(load_agent(args.agent).agent, policy=policy, grace=args.grace, store=store,
                      detached=detached)

    # What ``serve`` does once started (docs/memory.md), uvicorn's way.
    run(make_app() if args.store == "memory" else OnRedis(args.store, make_app), args.server,
        args.port, started=None if args.no_gc_tuning else gc_tuning.apply)
