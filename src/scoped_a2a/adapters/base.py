"""What every adapter shares: the adapted agent's shape, its backends, its card fields.

An adapter turns another framework's agent (an a2a-sdk ``AgentExecutor``, a Google ADK agent, a
pydantic-ai ``Agent``) into an :class:`~scoped_a2a.Agent` of this project: an async callable
taking a :class:`~scoped_a2a.RunContext`. The framework's code then runs inside the run's cancel
scope, so every rule of this runtime (cancel on hang-up, detached runs, CancelTask, deadlines,
shutdown with grace, owner scoping, push, the live trajectory) applies to it unchanged.

These frameworks are built on asyncio (locks, tasks, clients), so an adapted agent declares the
backends it runs on; ``serve`` refuses to start one on another backend, in one line, before
anything listens (:func:`check_backend`), and a run started on the wrong backend anyway (a
library user's own loop) fails with the same words instead of crashing inside the framework.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import sniffio

from ..runtime.failures import AgentError

if TYPE_CHECKING:
    from ..protocol.types import Message
    from ..runtime.context import RunContext
    from ..runtime.outcome import Outcome


class UnsupportedBackend(AgentError):
    """The adapted agent's framework cannot run on the event loop it was given.

    An :class:`~scoped_a2a.AgentError`: a run started on the wrong backend fails with these
    words, which tell the caller's operator what to change."""


class AdaptedAgent(ABC):
    """An agent of another framework, callable as this project's ``Agent``.

    Subclasses set ``framework`` (a name for messages and logs) and implement :meth:`run`.
    ``backends``: the AnyIO backends the framework runs on.
    """

    framework: ClassVar[str] = "an agent framework"
    backends: ClassVar[frozenset[str]] = frozenset({"asyncio"})

    async def __call__(self, ctx: RunContext, /) -> str | Outcome | Message | None:
        check_backend(self, sniffio.current_async_library())
        return await self.run(ctx)

    @abstractmethod
    async def run(self, ctx: RunContext) -> str | Outcome | Message | None:
        """Run the framework's agent for one run (cancelled through the run's scope)."""

    def card_fields(self) -> dict[str, Any]:
        """Agent-card fields the framework knows (``name``, ``description``, ``skills``...).

        The server merges them under the card it generates; fields given in code
        (``A2AApp(card=...)``) or on the command line (``serve --card FILE``) win over these.
        """
        return {}


def backends_of(agent: object) -> frozenset[str] | None:
    """The backends ``agent`` runs on, or None when it runs on any (a native agent)."""
    backends = getattr(agent, "backends", None)
    return backends if isinstance(backends, frozenset) else None


def check_backend(agent: object, backend: str) -> None:
    """Raise :class:`UnsupportedBackend` (one line saying what to do) when ``agent`` cannot
    run on ``backend`` (``"asyncio"`` or ``"trio"``)."""
    backends = backends_of(agent)
    if backends is None or backend in backends:
        return
    framework = getattr(agent, "framework", "this agent's framework")
    allowed = " or ".join(sorted(backends))
    raise UnsupportedBackend(
        f"{framework} runs on {allowed} only, not {backend}: serve it with --backend {allowed}"
        if len(backends) == 1 else
        f"{framework} runs on {allowed} only, not {backend}")
