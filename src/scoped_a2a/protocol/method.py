"""What an A2A method sees of one call, and where it writes its answer (no I/O).

Shared by every method table (``server.methods``, ``push.rpc``) and every binding (JSON-RPC and
HTTP+JSON build a :class:`Call` and implement :class:`Output`): it sits in the protocol layer so
that each of them can import it without importing the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from .dialect import Dialect, Frame
from .jsonrpc import RpcRequest
from .principal import ANONYMOUS, Principal

BAD_LAST_EVENT_ID = -1
"""``Call.last_event_id`` when the ``Last-Event-ID`` header is present but not a position."""
MAX_EVENT_ID_DIGITS = 18
"""A ``Last-Event-ID`` longer than this is refused (positions fit in 64 bits)."""

M = TypeVar("M", bound=Callable[..., Any])


@dataclass(slots=True)
class Call:
    """One call, as the methods see it (whatever binding it came over)."""

    dialect: Dialect
    rpc: RpcRequest
    extensions: frozenset[str]
    last_event_id: int | None
    """The ``Last-Event-ID`` header (None: absent; :data:`BAD_LAST_EVENT_ID`: malformed)."""
    principal: Principal = ANONYMOUS
    """Who is calling (resolved once per HTTP request); tasks of other principals are not
    found for this call."""


class Output:
    """Where a method writes its answer; each binding implements every method over ASGI."""

    async def result(self, result: bytes) -> None:
        """The one answer of a unary call (an encoded result)."""
        raise NotImplementedError

    async def event(self, result: bytes | Frame, event_id: int | None) -> None:
        """One stream event; a :class:`Frame`'s shared body must not be copied per stream."""
        raise NotImplementedError

    async def events(self, frames: Sequence[tuple[Frame, int]]) -> None:
        """Several stream events in log order (a binding may write them together)."""
        for frame, event_id in frames:
            await self.event(frame, event_id)

    async def keepalive(self) -> None:
        """A keep-alive on an open stream."""
        raise NotImplementedError

    async def start_stream(self) -> None:
        """Open the stream now (headers) although no event is ready yet."""
        raise NotImplementedError

    def write_deadline(self) -> AbstractContextManager[None]:
        """Bound the stream's writes (raises ``SlowConsumer`` when one makes no progress).

        The block also ends, quietly, when a keep-alive falls due (:meth:`rest`)."""
        raise NotImplementedError

    def rest(self, seconds: float) -> None:
        """Before waiting inside :meth:`write_deadline`: end that block quietly if the stream
        writes nothing for ``seconds`` from its last write (a keep-alive is then due)."""
        raise NotImplementedError

    def answer_on_hangup(self, answer: Callable[[float], Awaitable[bytes]]) -> None:
        """Register how to answer if the caller hangs up first (a half-close looks the same).

        ``answer(wait)`` waits up to ``wait`` seconds for the task to end and returns the
        encoded result, which the binding writes as :meth:`result` would. The binding calls it
        after the hang-up has cancelled the method, under a short shielded deadline, so a client
        that only half-closed reads its answer. ``answer`` must not refer to this output (a
        reference cycle would keep the request's task and body alive until the cyclic GC runs).
        """
        raise NotImplementedError


    # --- a method that watches for the hang-up itself (a blocking send) ------------------
    # Most methods run beside a watcher task that cancels them when the caller hangs up. A
    # method marked with :func:`watches_hangup` runs alone in the request's task, and waits
    # for what it needs while reading the caller's connection itself: one task and one task
    # group less per request.

    async def until_hangup(self, wake: Any) -> bool:
        """Read the caller's connection inside the cancel scope ``wake`` (not yet entered):
        True once the caller hung up, False when ``wake`` was cancelled first (whatever the
        method waited for happened). For methods marked :func:`watches_hangup` only."""
        raise NotImplementedError

    def watching(self) -> AbstractAsyncContextManager[Watching]:
        """For a method marked :func:`watches_hangup`: watch for the hang-up in a task of its
        own while the ``async with`` body runs; a hang-up cancels the body, and then the
        block ends quietly with ``hung_up`` set (the method returns without answering)."""
        raise NotImplementedError


class Watching:
    """What :meth:`Output.watching` yields: whether the caller hung up during the block."""

    __slots__ = ("hung_up",)

    def __init__(self) -> None:
        self.hung_up = False


def watches_hangup(method: M) -> M:
    """Mark ``method`` as one that watches for its caller's hang-up itself (see
    :meth:`Output.until_hangup`); the binding then starts no watcher task for it."""
    method.watches_hangup = True  # type: ignore[attr-defined]
    return method


Method = Callable[[Call, Output], Awaitable[None]]
"""A method: ``async def (call, out)``; raises ``A2AError`` for an error answer."""
