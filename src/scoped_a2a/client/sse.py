"""A server-sent-events decoder: bytes in, complete events out (no I/O).

Fed the response body chunk by chunk, it returns the events each chunk completes, so a reader can
hand every event that arrived together to its consumer as one batch. Comments (keep-alives) are
dropped; ``id:`` is kept as the event's id, and remembered as the stream's last event id, as the
SSE specification says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SSEDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self.last_event_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk``; return the events it completed (possibly none)."""
        self._buffer += chunk
        events: list[SSEEvent] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                return events
            end, skip = cut
            line = self._buffer[:end].decode("utf-8", errors="replace")
            self._buffer = self._buffer[end + skip :]
            event = self._line(line)
            if event is not None:
                events.append(event)

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            if not self._data:
                self._event, self._id = "", None
                return None
            event = SSEEvent("\n".join(self._data), self._event or "message", self._id)
            self._data, self._event, self._id = [], "", None
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
            self.last_event_id = value
        return None


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """Index of the first line terminator (CRLF, LF or CR) and its length."""
    lf = buffer.find(b"\n")
    cr = buffer.find(b"\r")
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, 1
    if cr + 1 == len(buffer):
        return None  # a CR at the end may be the first half of a CRLF: wait for more
    return (cr, 2) if buffer[cr + 1 : cr + 2] == b"\n" else (cr, 1)
