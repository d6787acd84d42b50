"""``--store``: the one place that maps a store URL's scheme to the module that serves it, and
the stores' options of ``serve``.

==================  ===========================  =====================================
``--store``         module                       needs
==================  ===========================  =====================================
``memory``          :mod:`.store_memory`         nothing (the default)
``sqlite:PATH``     :mod:`.store_sqlite`         nothing (Python's sqlite3)
``redis://...``     :mod:`.store_redis`          coredis (``scoped-a2a[redis]``)
``postgresql://``   :mod:`.store_postgres`       psycopg (``scoped-a2a[postgres]``)
==================  ===========================  =====================================

(``rediss://`` and ``unix://`` are Redis too, ``postgres://`` is PostgreSQL.) A store's module
is imported only when its scheme is given, so the default imports no store driver; a new store
is one line in :data:`SCHEMES` and one module with the two functions of :class:`StoreCommand`.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..store.liveness import DEFAULT_LEASE
from ..store.memory import DEFAULT_MAX_ENDED_BYTES
from .arg_types import at_least_one, parse_size, seconds, seconds_or_zero

if TYPE_CHECKING:
    import anyio

SCHEMES: dict[str, str] = {
    "memory": "store_memory",  # the whole URL
    "sqlite:": "store_sqlite",
    "redis://": "store_redis",
    "rediss://": "store_redis",
    "unix://": "store_redis",
    "postgresql://": "store_postgres",
    "postgres://": "store_postgres",
}
"""A ``--store`` URL's scheme (``memory`` is the whole URL) -> its module in this package."""


class StoreCommand(Protocol):
    """What a store's module gives ``serve`` (module-level functions)."""

    def check(self, url: str) -> None:
        """Before the event loop starts: SystemExit with one line for a URL this store cannot
        use, or a missing extra."""

    async def serve(self, args: argparse.Namespace, make_app: Any,
                    shutdown: anyio.Event) -> None:
        """Open the store, build the app with ``make_app(store, detached=None)`` and serve it
        until ``shutdown`` is set and it has drained; StartupError (one line) when the store
        cannot be used. Cancelled: stops at once (the app records what it cut short)."""


def store_module_name(url: str) -> str:
    """The name (in this package) of the module that serves ``url``; SystemExit (one line)
    for an unknown scheme."""
    for scheme, name in SCHEMES.items():
        if url == scheme if scheme == "memory" else url.startswith(scheme):
            return name
    raise SystemExit(f"--store must be 'memory', sqlite:PATH, a redis:// or a postgresql:// "
                     f"URL, not {url!r}")


def store_module(url: str) -> StoreCommand:
    """The module that serves ``url``, imported now; SystemExit (one line) for an unknown
    scheme."""
    return cast(StoreCommand, importlib.import_module(f".{store_module_name(url)}", __package__))


def check_store_url(url: str) -> StoreCommand:
    """:func:`store_module`, with the URL checked by it (before the event loop starts)."""
    module = store_module(url)
    module.check(url)
    return module


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``serve``'s stores group: where tasks live, what is kept, and the durable queue."""
    g = parser.add_argument_group(
        "stores", "Where tasks live and how many ended ones are kept; the durable queue.")
    g.add_argument("--store", default="memory",
                   metavar="memory|sqlite:PATH|redis://HOST:PORT/DB|postgresql://...",
                   help="where tasks live: in memory, in an SQLite file (one process; "
                        "survives restarts), in a shared Redis or a shared PostgreSQL; all "
                        "but memory make detached runs durable (docs/stores.md)")
    g.add_argument("--max-ended-tasks", type=at_least_one, default=10_000, metavar="N",
                   help="ended tasks kept, in memory or in the store (oldest evicted first)")
    g.add_argument("--max-ended-bytes", type=parse_size, default=DEFAULT_MAX_ENDED_BYTES,
                   metavar="SIZE",
                   help="bytes of ended tasks kept, as encoded JSON, in memory or in an SQLite "
                        "or PostgreSQL store (oldest evicted first); SIZE is bytes or e.g. "
                        "64MiB, 1GiB")
    g.add_argument("--retain", type=seconds, default=None, metavar="SECONDS",
                   help="with an SQLite or PostgreSQL store: delete ended tasks older than this "
                        "(and beyond --max-ended-tasks / --max-ended-bytes, oldest first)")
    g.add_argument("--no-worker", action="store_true",
                   help="with a Redis or PostgreSQL store: do not execute queued runs in this "
                        "process")
    add_queue_options(g)


def add_queue_options(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The durable queue's options, shared by ``serve`` and ``worker``."""
    g.add_argument("--store-wait", type=seconds_or_zero, default=0.0, metavar="SECONDS",
                   help="with a Redis or PostgreSQL store: wait up to this long for it to "
                        "answer at start-up (0: it must answer at once); then stop with exit "
                        "status 2")
    g.add_argument("--concurrency", type=at_least_one, default=16, metavar="N",
                   help="queued runs one worker executes at a time")
    g.add_argument("--claim-idle", type=seconds, default=30.0, metavar="SECONDS",
                   help="a queued run whose worker is silent this long goes to another "
                        "worker")
    g.add_argument("--lease", type=seconds, default=DEFAULT_LEASE, metavar="SECONDS",
                   help="with a Redis or PostgreSQL store: an interactive run whose process has "
                        "not renewed its liveness lease for this long is recorded canceled "
                        "(reason process-lost) by any other process; renewed every third of it")
    g.add_argument("--redis-prefix", default="scoped_a2a",
                   help="prefix of every Redis key (apps sharing one Redis differ here)")
    from .store_postgres import add_postgres_options

    add_postgres_options(g)
