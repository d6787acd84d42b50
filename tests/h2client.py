"""A raw HTTP/2 prior-knowledge client on one blocking socket (the ``h2`` package hypercorn
depends on), for tests that speak HTTP/2 frame by frame: tests/test_connections.py and
tests/test_h2_hostile.py."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings


class RawH2:
    """One HTTP/2 connection to ``127.0.0.1:port``; ``window``: the initial flow-control
    window it grants the server (None: h2's default)."""

    def __init__(self, port: int, *, window: int | None = None, timeout: float = 10.0) -> None:
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.flush()

    def flush(self) -> None:
        """Send every frame h2 has queued."""
        self.sock.sendall(self.conn.data_to_send())

    def close(self) -> None:
        self.sock.close()

    def headers(self, path: str, method: str = "GET", *, end_stream: bool = True,
                extra: list[tuple[str, str]] | None = None) -> int:
        """Queue a request's HEADERS on a new stream (sent by the next :meth:`flush`); its id."""
        stream_id: int = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, [(":method", method), (":scheme", "http"),
                                           (":authority", "127.0.0.1"), (":path", path),
                                           *(extra or [])], end_stream=end_stream)
        return stream_id

    def start(self, path: str, method: str = "GET", *, end_stream: bool = True,
              extra: list[tuple[str, str]] | None = None) -> int:
        """Send a request's HEADERS on a new stream now; its id."""
        stream_id = self.headers(path, method, end_stream=end_stream, extra=extra)
        self.flush()
        return stream_id

    def events_until_closed(self, timeout: float = 10.0) -> list[Any]:
        """Every event until the server closes the connection (or ``timeout``)."""
        events: list[Any] = []
        self.sock.settimeout(timeout)
        with contextlib.suppress(OSError):
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                events += self.conn.receive_data(data)
        return events

    def status(self, stream_id: int) -> int:
        """Read until ``stream_id``'s response has ended (so h2 counts the stream closed: with
        only the headers read, the next request could find this client's 100 concurrent
        streams used up, depending on timing); its status."""
        found = None
        ended = False
        while found is None or not ended:
            data = self.sock.recv(65536)
            assert data, "the server closed the HTTP/2 connection"
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and \
                        event.stream_id == stream_id:
                    found = int(dict(event.headers)[b":status"])
                if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)) and \
                        event.stream_id == stream_id:
                    ended = True
                if isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
            self.flush()
        return found

    def send_body(self, stream_id: int, data: bytes, *, end_stream: bool = False,
                  timeout: float = 10.0) -> list[Any]:
        """Send ``data`` on ``stream_id`` as the server's flow-control windows allow, reading
        frames while waiting for window; the events read meanwhile. Stops early (returning)
        once the server answers or resets that stream: a refused body is not sent on."""
        import select
        import time

        events: list[Any] = []
        deadline = time.monotonic() + timeout
        while True:
            for event in events:
                if getattr(event, "stream_id", None) == stream_id and isinstance(
                        event, (h2.events.ResponseReceived, h2.events.StreamReset)):
                    return events
            window = min(self.conn.local_flow_control_window(stream_id),
                         self.conn.max_outbound_frame_size)
            if data and window > 0 and not select.select([self.sock], [], [], 0)[0]:
                piece, data = data[:window], data[window:]
                self.conn.send_data(stream_id, piece, end_stream=end_stream and not data)
                self.flush()
                continue
            if not data:
                return events
            left = deadline - time.monotonic()
            assert left > 0, "the server granted no flow-control window in time"
            self.sock.settimeout(left)
            received = self.sock.recv(65536)
            assert received, "the server closed the HTTP/2 connection"
            events += self.conn.receive_data(received)
            self.flush()

    def read_events(self, seconds: float, until: Any = None) -> list[Any]:
        """Every event that arrives within ``seconds`` (received DATA is acknowledged), or
        until ``until(events)`` is true."""
        import time

        events: list[Any] = []
        deadline = time.monotonic() + seconds
        with contextlib.suppress(OSError):
            while (left := deadline - time.monotonic()) > 0 and not (until and until(events)):
                self.sock.settimeout(left)
                received = self.sock.recv(65536)
                if not received:
                    break
                for event in self.conn.receive_data(received):
                    events.append(event)
                    if isinstance(event, h2.events.DataReceived):
                        self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                            event.stream_id)
                self.flush()
        return events
