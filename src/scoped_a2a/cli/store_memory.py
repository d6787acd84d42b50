"""``serve --store memory`` (the default): tasks in this process's memory, bounded by
``--max-ended-tasks`` and ``--max-ended-bytes`` (docs/memory.md); a restart loses them."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from .startup import listen


def check(url: str) -> None:
    """Nothing to check: memory needs no file, server or extra."""


async def serve(args: argparse.Namespace, make_app: Any, shutdown: anyio.Event) -> None:
    """Serve until ``shutdown`` is set and the app has drained; the app opens its own server
    nursery (its lifespan). Cancelled: stops at once."""
    from ..store.memory import MemoryTaskStore

    app = make_app(MemoryTaskStore(max_ended_tasks=args.max_ended_tasks,
                                   max_ended_bytes=args.max_ended_bytes))
    await listen(args, app, shutdown)
