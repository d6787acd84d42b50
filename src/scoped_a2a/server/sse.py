"""Server-sent events: the writer of one stream response.

Headers go out with the first event, so a handler that fails before streaming anything still
answers with an ordinary JSON-RPC error. Every event carries ``id:`` = its position in the task's
log, so a client that reconnects with ``Last-Event-ID`` resumes where it left off.

A write that cannot complete within ``write_timeout`` (a client that stopped reading) ends the
stream with :class:`SlowConsumer`; other streams and the run are never held up by it, because each
stream reads the shared log at its own cursor.
"""

from __future__ import annotations

import anyio

from .asgi import Send


class SlowConsumer(Exception):
    """The client did not take an event within the write timeout; its stream is closed."""


class SSEWriter:
    def __init__(self, send: Send, *, write_timeout: float = 30.0) -> None:
        self._send = send
        self._write_timeout = write_timeout
        self.started = False
        self.events_sent = 0

    async def _write(self, chunk: bytes) -> None:
        try:
            with anyio.fail_after(self._write_timeout):
                if not self.started:
                    self.started = True
                    await self._send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [
                                (b"content-type", b"text/event-stream"),
                                (b"cache-control", b"no-cache"),
                                (b"x-accel-buffering", b"no"),
                            ],
                        }
                    )
                await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
        except TimeoutError:
            raise SlowConsumer from None

    async def event(self, data: bytes, event_id: int | None = None) -> None:
        """Send one event; ``data`` is one complete JSON-RPC response (no newlines)."""
        if event_id is None:
            await self._write(b"data: " + data + b"\n\n")
        else:
            await self._write(b"id: " + str(event_id).encode() + b"\ndata: " + data + b"\n\n")
        self.events_sent += 1

    async def keepalive(self) -> None:
        """A comment line, so proxies and clients see an idle stream is alive."""
        await self._write(b": keep-alive\n\n")

    async def close(self) -> None:
        """End the response body (headers first, if nothing was sent)."""
        if not self.started:
            self.started = True
            await self._send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})
