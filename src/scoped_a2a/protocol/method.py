"""What an A2A method sees of one JSON-RPC call, and where it writes its answer (no I/O).

Shared by every method table (``server.methods``, ``push.rpc``): it sits in the protocol layer so
that each of them can import it without importing the other. The app implements :class:`Output`
over ASGI.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .dialect import Dialect
from .jsonrpc import RpcRequest
from .principal import ANONYMOUS, Principal


@dataclass(slots=True)
class Call:
    """One JSON-RPC call, as the methods see it."""

    dialect: Dialect
    rpc: RpcRequest
    extensions: frozenset[str]
    last_event_id: int | None
    principal: Principal = ANONYMOUS
    """Who is calling (resolved once per HTTP request); tasks of other principals are not
    found for this call."""


class Output:
    """Where a method writes its answer; implemented by the app over ASGI."""

    async def result(self, result: bytes) -> None:
        raise NotImplementedError

    async def event(self, result: bytes, event_id: int | None) -> None:
        raise NotImplementedError

    async def keepalive(self) -> None:
        raise NotImplementedError


Method = Callable[[Call, Output], Awaitable[None]]
"""A method: ``async def (call, out)``; raises ``A2AError`` for a JSON-RPC error."""
