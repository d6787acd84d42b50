"""The observer interface: the hooks the app and the runner call, all no-ops here.

Hooks are synchronous except :meth:`Observer.run`, which wraps a run's execution (so a tracer can
make the run's span current for everything the agent does, calls to other agents included).
Hooks must not raise and must not block; an observer that fails to record something logs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Any, Protocol

_NOTHING: AbstractContextManager[None] = nullcontext()  # reusable: no state


class RunInfo(Protocol):
    """What an observer may read of a run (``scoped_a2a.runtime.run.Run`` has all of it)."""

    task_id: str
    context_id: str
    detach_reason: str | None
    cancelled_at: float | None


class Observer:
    """Observes requests and runs. This base does nothing; subclasses override what they need."""

    def request(self, scope: Mapping[str, Any]) -> AbstractContextManager[None]:
        """Around one HTTP request to the JSON-RPC endpoint (``scope``: the ASGI scope)."""
        return _NOTHING

    def request_method(self, method: str, dialect: str, transport: str = "JSONRPC") -> None:
        """The request's method (as sent), dialect (``"1.0"`` or ``"0.3"``) and transport
        (``"JSONRPC"`` or ``"HTTP+JSON"``); called once the request is parsed, before it runs."""

    async def run(
        self, execute: Callable[..., Awaitable[None]], run: RunInfo, *args: Any
    ) -> None:
        """Execute a run: ``await execute(run, *args)``; cancellation and errors pass through."""
        await execute(run, *args)

    def run_ended(self, run: RunInfo, outcome: str, reason: str, seconds: float) -> None:
        """A run ended (called in the run's task, before its log line)."""

    def store_error(self, operation: str) -> None:
        """A task store operation failed."""

    def metrics_page(self) -> tuple[bytes, str] | None:
        """The body and content type of ``GET /metrics``; None: no such page (404)."""
        return None


NOOP = Observer()


class Observers(Observer):
    """Several observers as one; each hook is called on each, in order."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)

    @contextmanager
    def request(self, scope: Mapping[str, Any]) -> Iterator[None]:
        with ExitStack() as stack:
            for obs in self.observers:
                stack.enter_context(obs.request(scope))
            yield

    def request_method(self, method: str, dialect: str, transport: str = "JSONRPC") -> None:
        for obs in self.observers:
            obs.request_method(method, dialect, transport)

    async def run(
        self, execute: Callable[..., Awaitable[None]], run: RunInfo, *args: Any
    ) -> None:
        wrapped = execute
        for obs in reversed(self.observers):
            wrapped = _nest(obs, wrapped)
        await wrapped(run, *args)

    def run_ended(self, run: RunInfo, outcome: str, reason: str, seconds: float) -> None:
        for obs in self.observers:
            obs.run_ended(run, outcome, reason, seconds)

    def store_error(self, operation: str) -> None:
        for obs in self.observers:
            obs.store_error(operation)

    def metrics_page(self) -> tuple[bytes, str] | None:
        for obs in self.observers:
            page = obs.metrics_page()
            if page is not None:
                return page
        return None


def _nest(obs: Observer, inner: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    async def call(run: RunInfo, *args: Any) -> None:
        await obs.run(inner, run, *args)
    return call


def observer_of(observe: Observer | Sequence[Observer] | None) -> Observer:
    """One observer from the app's ``observe=`` argument (None: the no-op)."""
    if observe is None:
        return NOOP
    if isinstance(observe, Observer):
        return observe
    return Observers(list(observe)) if len(observe) != 1 else observe[0]
