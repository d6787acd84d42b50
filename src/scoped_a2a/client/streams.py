"""``EventStream``: the events of one open stream, as an async iterator.

It reads an :class:`EventSource`: an SSE response (:class:`SSESource`, JSON-RPC and HTTP+JSON)
or a gRPC call's messages (:class:`~.grpc_call.GrpcEvents`).

It is handed out by ``async with client.stream(...) as events`` (or ``client.subscribe``), never
by an async generator, so no ``yield`` ever sits inside a cancel scope (PEP 789): the deadline on
each read is entered and left inside ``__anext__``.

Events that arrive together (one network read) can be taken as one batch with
:meth:`EventStream.next_batch`. An error event raises its :class:`A2AError` after the events that
came before it. Cancellation ends a read at once; the response is closed by the context manager
that opened it.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
import httpx

from ..protocol.errors import A2AError
from ..timeouts import fail_after
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


@dataclass(slots=True)
class RawEvent:
    """One event as it came: its result JSON (a 1.0 ``StreamResponse`` or the dialect's
    shape) and its log position, if the binding carries one."""

    payload: bytes
    position: int | None


class EventSource(Protocol):
    """Where an :class:`EventStream` reads events: an SSE response or a gRPC stream."""

    where: str
    """The agent's address, for error messages."""

    async def receive(self) -> list[RawEvent | A2AError] | None:
        """The events of the next network read (maybe none: a keep-alive), an error event
        as an A2AError item after those before it; None when the stream ended. Raises
        :class:`TransportError` when the connection fails."""
        ...

    async def aclose(self) -> None:
        """Stop reading (the context manager that opened the stream closes it)."""
        ...


class SSESource:
    """The events of an open ``text/event-stream`` response (JSON-RPC or HTTP+JSON)."""

    def __init__(self, response: httpx.Response,
                 unwrap: Callable[[SSEEvent], bytes] | None = None) -> None:
        self._response = response
        self._unwrap = unwrap or _jsonrpc_result
        # The raw body when it is not content-encoded (an SSE stream never is, in practice):
        # one generator layer less per network read than ``aiter_bytes``, which decodes.
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        self._chunks: AsyncIterator[bytes] = (
            response.aiter_raw() if coding in ("", "identity") else response.aiter_bytes())
        self._decoder = SSEDecoder()
        self.where = str(response.url)

    async def receive(self) -> list[RawEvent | A2AError] | None:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            return None
        except httpx.TransportError as exc:
            raise transport_error(exc, self.where) from None
        items: list[RawEvent | A2AError] = []
        for sse in self._decoder.feed(chunk):
            try:
                items.append(RawEvent(self._unwrap(sse), _position(sse.id)))
            except A2AError as exc:
                items.append(exc)
        return items

    async def aclose(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            # Shielded so a cancelled reader still releases the connection; bounded so a
            # stuck close cannot hold the cancellation up.
            with anyio.move_on_after(1.0, shield=True):
                await close()


class EventStream:
    """Async iterator of :class:`StreamEvent` over one open stream (an SSE response, or any
    :class:`EventSource`, such as a gRPC call's)."""

    def __init__(
        self, response: httpx.Response | EventSource, codec: Codec, *,
        idle_timeout: float | None = None, unwrap: Callable[[SSEEvent], bytes] | None = None,
    ) -> None:
        """``unwrap`` turns one SSE event into its result JSON, raising its error; the default
        reads a JSON-RPC response (the HTTP+JSON binding passes its own). It applies to an
        SSE response only: another source hands out result JSON already."""
        self._source: EventSource = (
            SSESource(response, unwrap) if isinstance(response, httpx.Response) else response)
        self._codec = codec
        self._idle_timeout = idle_timeout
        self._pending: deque[StreamEvent | A2AError] = deque()
        self._closed = False
        self.last_position: int | None = None
        """The position (SSE ``id``) of the last event handed out, if the agent sends ids."""
        self.observe: Callable[[StreamEvent], object] | None = None
        """Called with each event as it is handed out (the abandon rule's view of the task)."""
        self.protect_first: float | None = None
        """Seconds a read may go on after the reader is cancelled, while no event has been
        handed out yet (None: reads are cancelled at once). The stream's first event names the
        task: an owner that gives up right after its send must still learn it, to cancel it.
        (Cancelling a read in flight would break the connection, so it is finished instead.)"""
        self._observed = 0  # pending events already passed to observe (protected reads)
        self._handed = False  # an event was handed out

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
            self._observed = 0
            self._closed = True
            raise item
        if item.position is not None:
            self.last_position = item.position
        self._handed = True
        if self._observed:
            self._observed -= 1
        elif self.observe is not None:
            self.observe(item)
        return item

    async def _fill(self) -> bool:
        """Read from the network until at least one event is pending; False at the end."""
        while not self._pending:
            if self._closed:
                return False
            try:
                if self.protect_first is not None and not self._handed:
                    items = await self._protected_receive(self.protect_first)
                elif self._idle_timeout is None:  # no cancel scope per read when unbounded
                    items = await self._source.receive()
                else:
                    with fail_after(self._idle_timeout):
                        items = await self._source.receive()
            except TimeoutError as exc:
                self._closed = True
                raise transport_error(exc, self._source.where) from None
            except TransportError:
                self._closed = True
                raise
            if items is None:
                self._closed = True
                return False
            for item in items:
                self._pending.extend(self._convert(item))
        return True

    async def _protected_receive(self, grace: float) -> list[RawEvent | A2AError] | None:
        """One read that a cancellation of the reader lets finish (at most ``grace`` s more).

        The read runs as a shielded child task bounded by the idle timeout; when the reader is
        cancelled meanwhile (or was already), the read's deadline comes down to ``grace`` and
        the reader waits for it, shielded. What it read is made pending and passed to
        ``observe`` at once (the owner's exception handler reads the task from there); then
        the cancellation goes on. Raises TimeoutError at the idle timeout, and the read's own
        errors.
        """
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            await self._read_within(grace)
            raise
        done = anyio.Event()
        scope = anyio.CancelScope(shield=True)
        if self._idle_timeout is not None:
            scope.deadline = anyio.current_time() + self._idle_timeout
        got: list[list[RawEvent | A2AError] | None] = []
        failed: list[BaseException] = []
        reading = False

        async def read() -> None:
            nonlocal reading
            try:
                with scope:
                    reading = True
                    got.append(await self._source.receive())
            except Exception as exc:  # handed to the reader below
                failed.append(exc)
            finally:
                done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            try:
                await done.wait()
            except anyio.get_cancelled_exc_class():
                scope.deadline = min(scope.deadline, anyio.current_time() + grace)
                with anyio.CancelScope(shield=True):
                    await done.wait()
                if not reading:  # cancelled before its shield was up: read here instead
                    await self._read_within(grace)
                elif got and got[0] is not None:
                    self._take_in(got[0])
                raise
        if failed:
            raise failed[0]
        if not got:  # the idle timeout ended the read
            raise TimeoutError
        return got[0]

    async def _read_within(self, grace: float) -> None:
        """A read, shielded, of at most ``grace`` s, for a reader already cancelled; what it
        reads is made pending and observed. Its errors are dropped: the reader is ending."""
        with anyio.move_on_after(grace, shield=True), \
                contextlib.suppress(TransportError, A2AError):
            items = await self._source.receive()
            if items is not None:
                self._take_in(items)

    def _take_in(self, items: list[RawEvent | A2AError]) -> None:
        for item in items:
            self._pending.extend(self._convert(item))
        self._observe_pending()

    def _observe_pending(self) -> None:
        """Pass the pending events to ``observe`` now (not again when handed out)."""
        for item in list(self._pending)[self._observed:]:
            if isinstance(item, StreamEvent) and self.observe is not None:
                self.observe(item)
            self._observed += 1

    def _convert(self, item: RawEvent | A2AError) -> list[StreamEvent | A2AError]:
        if isinstance(item, A2AError):
            return [item]
        try:
            payload = self._codec.stream_result(item.payload)
        except A2AError as exc:
            return [exc]
        if payload is None:
            return []
        return [StreamEvent(payload, item.position)]

    async def aclose(self) -> None:
        """Stop reading (the owning context manager closes the response itself)."""
        self._closed = True
        await self._source.aclose()


__all__ = ["EventSource", "EventStream", "RawEvent", "SSESource", "StreamEvent",
           "TransportError"]
