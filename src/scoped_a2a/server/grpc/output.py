"""Writing a method's answer as gRPC: response messages, then the status in the trailers.

:class:`GrpcWriter` is the SSE writer's gRPC twin: the same single write deadline, keep-alive
timing and slow-consumer rule (:mod:`..sse`), with length-prefixed protobuf messages instead of
``data:`` lines. The response always starts with ``http.response.start`` (``trailers: True``)
and ends with ``http.response.trailers``, errors included: hypercorn's shortcut for a response
that is only trailers sends them as headers followed by an empty DATA frame, which grpcio
refuses.

The method layer writes JSON (a result, or a ``StreamResponse`` per event); each is parsed into
the method's response message here. Events the proto cannot carry (the trajectory extension's
own events) are left out of a gRPC stream. A JSON answer that does not fit the proto is a bug
of ours: logged with an error id, and the caller gets INTERNAL with that id.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence

import anyio
from google.protobuf.json_format import ParseError
from google.protobuf.message import Message

from ...protocol.dialect import Frame
from ...protocol.errors import A2AError
from ...protocol.grpc.framing import ACCEPT_ENCODING, CONTENT_TYPE, frame, status_trailers
from ...protocol.grpc.messages import from_json
from ...protocol.grpc.status import OK, error_trailers
from ...runtime.failures import new_error_id
from ..asgi import Send
from ..closing import ClosingDeadlines
from ..dispatch import Responder
from ..sse import SLICE, SSEWriter

log = logging.getLogger("scoped_a2a.server")

_HEADERS = [(b"content-type", CONTENT_TYPE), (b"grpc-accept-encoding", ACCEPT_ENCODING)]
_TRAJECTORY_HEAD = b'{"trajectory":'


def encode(json_answer: bytes, cls: type[Message]) -> bytes:
    """The serialized ``cls`` message for a method's JSON answer.

    Raises A2AError (internal, with an error id that is in the log) when the JSON does not fit.
    """
    try:
        return from_json(json_answer, cls).SerializeToString()
    except ParseError as exc:
        error_id = new_error_id()
        log.error("a %s answer did not fit the proto (error id %s): %s", cls.__name__,
                  error_id, exc)
        raise A2AError(f"internal error: the answer could not be encoded (error id {error_id})"
                       ) from None


class EncodedCache:
    """Stream events encoded once as gRPC messages, shared by every stream that sends them.

    The method layer hands each subscriber of a task the same :class:`Frame` (its JSON encoded
    once); this keeps that sharing for gRPC: keyed by the frame's body object (held, so its
    identity cannot be reused), bounded by entries and bytes, oldest first out. 20 stalled
    subscribers of a task with a 1 MiB snapshot held 20 encoded copies without it. No awaits.
    """

    def __init__(self, *, max_entries: int = 256, max_bytes: int = 64 << 20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[int, type[Message]], tuple[bytes, bytes]] = OrderedDict()
        self._bytes = 0

    def framed(self, event: Frame, response: type[Message]) -> bytes | None:
        """The length-prefixed message for a stream event (None: not a gRPC event)."""
        key = (id(event.body), response)
        hit = self._items.get(key)
        if hit is not None and hit[0] is event.body:
            self._items.move_to_end(key)
            return hit[1]
        framed = framed_event(event.joined(), response)
        if framed is not None and len(framed) <= self.max_bytes:
            self._items[key] = (event.body, framed)
            self._bytes += len(framed)
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, old) = self._items.popitem(last=False)
                self._bytes -= len(old)
        return framed


def framed_event(json_event: bytes, response: type[Message]) -> bytes | None:
    """A ``StreamResponse`` JSON as a length-prefixed message; None for the events the proto
    cannot carry (the trajectory extension's own: a gRPC stream leaves them out)."""
    if json_event.startswith(_TRAJECTORY_HEAD):
        return None
    return frame(encode(json_event, response))


class GrpcWriter(SSEWriter):
    """Writes one gRPC response: headers, messages of type ``response``, trailers.

    A big message goes out in slices of at most :data:`SLICE` bytes (as SSE does), so a
    stream stuck on a client that stopped reading holds one slice in the server's buffers.
    """

    def __init__(self, send: Send, response: type[Message], *,
                 write_timeout: float = 30.0, cache: EncodedCache | None = None) -> None:
        super().__init__(send, write_timeout=write_timeout)
        self.response = response
        self.cache = cache if cache is not None else EncodedCache(max_entries=0)
        self.partial = False
        """A write of messages began and did not return (it was cancelled): the client may
        hold part of a message, so the stream cannot end with trailers."""

    async def start(self) -> None:
        if not self.started:
            self.started = True
            await self._send({"type": "http.response.start", "status": 200,
                              "headers": _HEADERS, "trailers": True})
            self.last_write = anyio.current_time()

    async def _write_sliced(self, data: bytes) -> None:
        """Write whole messages: one write, or slices of :data:`SLICE` bytes for a big one."""
        self.partial = True
        if len(data) <= SLICE:
            await self._write(data)
        else:
            view = memoryview(data)
            for at in range(0, len(data), SLICE):
                await self._write(bytes(view[at:at + SLICE]))
        self.partial = False

    async def event(self, data: bytes, event_id: int | None = None) -> None:
        framed = framed_event(data, self.response)
        if framed is not None:
            await self._write_sliced(framed)
            self.events_sent += 1

    async def result(self, frame: Frame, event_id: int, *, before: bytes = b"",
                     after: bytes = b"") -> None:
        framed = self.cache.framed(frame, self.response)
        if framed is not None:
            await self._write_sliced(framed)
            self.events_sent += 1

    async def results(self, frames: Sequence[tuple[Frame, int]], *, before: bytes = b"",
                      after: bytes = b"") -> None:
        """Several events in as few writes as possible (up to :data:`SLICE` bytes each)."""
        batch: list[bytes] = []
        size = 0
        for event, _ in frames:
            framed = self.cache.framed(event, self.response)
            if framed is None:
                continue
            if batch and size + len(framed) > SLICE:
                await self._write_sliced(b"".join(batch))
                self.events_sent += len(batch)
                batch, size = [], 0
            if len(framed) > SLICE:
                await self._write_sliced(framed)
                self.events_sent += 1
                continue
            batch.append(framed)
            size += len(framed)
        if batch:
            await self._write_sliced(b"".join(batch))
            self.events_sent += len(batch)

    async def keepalive(self) -> None:
        # gRPC has no comment frames: HTTP/2 PINGs keep the connection alive. Only the timing
        # moves on, so the next keep-alive is due a full interval from now.
        self.last_write = anyio.current_time()

    async def end(self, trailers: list[tuple[bytes, bytes]]) -> None:
        """End the response with ``trailers`` (headers first if nothing was sent)."""
        await self.start()
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        await self._send({"type": "http.response.trailers", "headers": trailers,
                          "more_trailers": False})

    async def close(self) -> None:
        await self.end(status_trailers(OK))


class GrpcOutput(Responder):
    """A method's answer as gRPC: one message (unary) or a stream, then the status."""

    _sse: GrpcWriter

    def __init__(self, send: Send, response: type[Message], write_timeout: float,
                 cache: EncodedCache | None = None,
                 closing: ClosingDeadlines | None = None) -> None:
        self.write_timeout = write_timeout
        self.closing = closing
        self._sse = GrpcWriter(send, response, write_timeout=write_timeout, cache=cache)
        self._done = False

    async def result(self, result: bytes) -> None:
        # DeleteTaskPushNotificationConfig's result is null: google.protobuf.Empty.
        body = frame(encode(b"{}" if result == b"null" else result, self._sse.response))
        self._done = True

        async def write() -> None:
            await self._sse.start()
            await self._sse._send({"type": "http.response.body", "body": body,
                                   "more_body": True})
            await self._sse.end(status_trailers(OK))

        await self.final_write(write)

    async def error(self, exc: A2AError) -> None:
        if self._done:
            return
        self._done = True
        trailers = error_trailers(exc)
        await self.final_write(lambda: self._sse.end(trailers))

    async def status(self, trailers: list[tuple[bytes, bytes]]) -> None:
        """End the call with these status trailers (a refusal before any method ran)."""
        if not self._done:
            self._done = True
            await self.final_write(lambda: self._sse.end(trailers))

    async def expired(self, trailers: list[tuple[bytes, bytes]]) -> None:
        """The call's deadline passed before its answer was complete: end it with
        ``trailers`` (DEADLINE_EXCEEDED), after the messages a stream already sent. If the
        deadline cut a message short (only a client that stopped reading lets a write wait
        that long), nothing more is written: the response is left unfinished, which hypercorn
        answers with ``RST_STREAM``."""
        if self._sse.partial:
            self._done = True
            return
        await self.status(trailers)

    async def finish(self) -> None:
        """The method returned: end the stream with OK (a stream with no event too)."""
        if not self._done:
            self._done = True
            await self.final_write(self._sse.close)
