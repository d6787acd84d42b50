"""``EventStream``: the events of one open SSE response, as an async iterator.

It is handed out by ``async with client.stream(...) as events`` (or ``client.subscribe``), never
by an async generator, so no ``yield`` ever sits inside a cancel scope (PEP 789): the deadline on
each read is entered and left inside ``__anext__``.

Events that arrive together (one network read) can be taken as one batch with
:meth:`EventStream.next_batch`. An error event raises its :class:`A2AError` after the events that
came before it. Cancellation ends a read at once; the response is closed by the context manager
that opened it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable

import anyio
import httpx

from ..protocol.errors import A2AError
from .errors import TransportError
from .rpc import decode_answer, transport_error
from .sse import SSEDecoder, SSEEvent
from .wire import Codec, StreamEvent


def _position(event_id: str | None) -> int | None:
    if event_id is None or not event_id.strip().isdigit():
        return None
    return int(event_id.strip())


def _jsonrpc_result(sse: SSEEvent) -> bytes:
    return decode_answer(sse.data)


class EventStream:
    """Async iterator of :class:`StreamEvent` over one open stream response."""

    def __init__(
        self, response: httpx.Response, codec: Codec, *, idle_timeout: float | None = None,
        unwrap: Callable[[SSEEvent], bytes] | None = None,
    ) -> None:
        """``unwrap`` turns one SSE event into its result JSON, raising its error; the default
        reads a JSON-RPC response (the HTTP+JSON binding passes its own)."""
        self._response = response
        self._unwrap = unwrap or _jsonrpc_result
        self._codec = codec
        self._idle_timeout = idle_timeout
        self._chunks: AsyncIterator[bytes] = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._pending: deque[StreamEvent | A2AError] = deque()
        self._closed = False
        self.last_position: int | None = None
        """The position (SSE ``id``) of the last event handed out, if the agent sends ids."""
        self.observe: Callable[[StreamEvent], object] | None = None
        """Called with each event as it is handed out (the abandon rule's view of the task)."""

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> StreamEvent:
        while not self._pending:
            if not await self._fill():
                raise StopAsyncIteration
        return self._take()

    async def next_batch(self) -> list[StreamEvent]:
        """Every event that arrived with the next network read (``[]`` when the stream ended).

        Raises the stream's error event, after the batch that preceded it was handed out.
        """
        while not self._pending:
            if not await self._fill():
                return []
        batch: list[StreamEvent] = []
        while self._pending and not isinstance(self._pending[0], A2AError):
            batch.append(self._take())
        if not batch:
            self._take()  # raises the error
        return batch

    def _take(self) -> StreamEvent:
        item = self._pending.popleft()
        if isinstance(item, A2AError):
            self._pending.clear()
            self._closed = True
            raise item
        if item.position is not None:
            self.last_position = item.position
        if self.observe is not None:
            self.observe(item)
        return item

    async def _fill(self) -> bool:
        """Read from the network until at least one event is pending; False at the end."""
        while not self._pending:
            if self._closed:
                return False
            try:
                with anyio.fail_after(self._idle_timeout):
                    chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._closed = True
                return False
            except (TimeoutError, httpx.TransportError) as exc:
                self._closed = True
                raise transport_error(exc, str(self._response.url)) from None
            for sse in self._decoder.feed(chunk):
                self._pending.extend(self._convert(sse))
        return True

    def _convert(self, sse: SSEEvent) -> list[StreamEvent | A2AError]:
        try:
            result = self._unwrap(sse)
            payload = self._codec.stream_result(result)
        except A2AError as exc:
            return [exc]
        if payload is None:
            return []
        return [StreamEvent(payload, _position(sse.id))]

    async def aclose(self) -> None:
        """Stop reading (the owning context manager closes the response itself)."""
        self._closed = True
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            # Shielded so a cancelled reader still releases the connection; bounded so a
            # stuck close cannot hold the cancellation up.
            with anyio.move_on_after(1.0, shield=True):
                await close()


__all__ = ["EventStream", "StreamEvent", "TransportError"]
