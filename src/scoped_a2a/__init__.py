"""scoped-a2a: an A2A server, client and step runner on AnyIO structured concurrency.

The public names below are imported on first use (PEP 562), not when the package is: so
``import scoped_a2a`` and the command line's start-up (``python -m scoped_a2a``, whose first
steps install its Ctrl-C handling) do not wait for the server, the client and httpx to import.
``from scoped_a2a import A2AApp`` works as it always did.
"""

from __future__ import annotations

import sys


def _exit_quietly(signum: int, frame: object) -> None:
    import os

    os.write(2, b"interrupted\n")
    raise SystemExit(130)


def _is_the_program() -> bool:
    """True for ``python -m scoped_a2a`` and for the ``scoped-a2a`` console script."""
    if sys.orig_argv[1:3] == ["-m", "scoped_a2a"]:
        return True
    script = sys.argv[0] if sys.argv else ""
    return script.replace("\\", "/").rsplit("/", 1)[-1].startswith("scoped-a2a")


if _is_the_program():
    # ``python -m scoped_a2a`` or the console script: this package is the program (the
    # script's first import is ours). Until the command line's main() takes over (first
    # thing, with Python's handler that also remembers the Ctrl-C: cli/interrupt.py), a
    # Ctrl-C while the rest imports is one line and 130, not a traceback from the middle of
    # an import. A program that merely imports the library
    # keeps its own SIGINT handling.
    # The C module: ``import signal`` imports enum first, a window of its own.
    import _signal  # type: ignore[import-not-found]

    _signal.signal(_signal.SIGINT, _exit_quietly)

import importlib  # noqa: E402  (after the handler: these imports take time too)
from typing import TYPE_CHECKING, Any  # noqa: E402

if TYPE_CHECKING:
    from .client import A2AClient, DirectorySink, MemorySink, Step, follow_trajectory
    from .protocol.errors import A2AError
    from .protocol.principal import Principal
    from .protocol.types import Message, Part, Role, Task, TaskState
    from .runtime.context import Agent, RunContext
    from .runtime.failures import AgentError
    from .runtime.outcome import Outcome
    from .runtime.policy import RunPolicy
    from .server.app import A2AApp
    from .server.serve import serve
    from .store.base import TaskStore
    from .store.memory import MemoryTaskStore

_WHERE = {
    "A2AApp": ".server.app",
    "A2AClient": ".client",
    "A2AError": ".protocol.errors",
    "Agent": ".runtime.context",
    "AgentError": ".runtime.failures",
    "DirectorySink": ".client",
    "MemorySink": ".client",
    "MemoryTaskStore": ".store.memory",
    "Message": ".protocol.types",
    "Outcome": ".runtime.outcome",
    "Part": ".protocol.types",
    "Principal": ".protocol.principal",
    "Role": ".protocol.types",
    "RunContext": ".runtime.context",
    "RunPolicy": ".runtime.policy",
    "Step": ".client",
    "Task": ".protocol.types",
    "TaskState": ".protocol.types",
    "TaskStore": ".store.base",
    "follow_trajectory": ".client",
    "serve": ".server.serve",
}
"""Each public name, by the module it comes from."""

__all__ = [
    "A2AApp",
    "A2AClient",
    "A2AError",
    "Agent",
    "AgentError",
    "DirectorySink",
    "MemorySink",
    "MemoryTaskStore",
    "Message",
    "Outcome",
    "Part",
    "Principal",
    "Role",
    "RunContext",
    "RunPolicy",
    "Step",
    "Task",
    "TaskState",
    "TaskStore",
    "follow_trajectory",
    "serve",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # imported once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
