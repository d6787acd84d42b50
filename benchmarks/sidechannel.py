"""A side channel from the agents (in the server processes) to the load generator.

Agents report what they saw (``start``, ``cancel``, ``done``) as one UDP datagram each to
127.0.0.1:``$BENCH_SIGNAL_PORT``, stamped with ``time.monotonic()``. On Linux that clock is
CLOCK_MONOTONIC, shared by every process on the machine, so the generator can subtract the time it
hung up from the time an agent observed its cancellation. Sending is a non-blocking ``sendto`` on
loopback: it never waits, so it adds nothing measurable to the agent and works on any event loop.
Without the variable (an agent run by hand) signals go nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections import defaultdict

ENV_PORT = "BENCH_SIGNAL_PORT"
ENV_DIR = "BENCH_DIR"

_sock: socket.socket | None = None


def signal(kind: str, key: str) -> None:
    """Tell the generator ``kind`` happened to the run named ``key``, stamped now."""
    global _sock
    port = os.environ.get(ENV_PORT)
    if not port:
        return
    stamp = time.monotonic()
    if _sock is None:
        _sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _sock.setblocking(False)
    # A full socket buffer loses one signal; the generator counts what it gets.
    with contextlib.suppress(OSError):
        _sock.sendto(f"{kind} {key} {stamp:.9f}".encode(), ("127.0.0.1", int(port)))


def go_file(key: str) -> str | None:
    """The file whose existence tells a waiting agent to go on (None outside a benchmark)."""
    base = os.environ.get(ENV_DIR)
    return os.path.join(base, f"go-{key}") if base else None


class Signals(asyncio.DatagramProtocol):
    """The generator's end: records every signal, lets coroutines wait for one."""

    def __init__(self) -> None:
        self.stamps: dict[tuple[str, str], float] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.repeats: dict[tuple[str, str], int] = defaultdict(int)
        """How many times each (kind, key) came in (a run that ran twice signals twice)."""
        self._waiters: dict[tuple[str, str], list[asyncio.Future[float]]] = defaultdict(list)
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: object) -> None:
        try:
            kind, key, stamp = data.decode().split()
            t = float(stamp)
        except ValueError:
            return
        self.stamps.setdefault((kind, key), t)
        self.counts[kind] += 1
        self.repeats[(kind, key)] += 1
        for fut in self._waiters.pop((kind, key), []):
            if not fut.done():
                fut.set_result(t)

    async def wait(self, kind: str, key: str, timeout: float) -> float | None:
        """The stamp of signal ``kind`` for ``key``, or None if it does not come in time."""
        if (kind, key) in self.stamps:
            return self.stamps[(kind, key)]
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters[(kind, key)].append(fut)
        try:
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            return None
        finally:
            waiters = self._waiters.get((kind, key))
            if waiters and fut in waiters:
                waiters.remove(fut)

    def keys(self, kind: str, prefix: str) -> set[str]:
        """Keys starting with ``prefix`` that have signalled ``kind``."""
        return {k for (kd, k) in self.stamps if kd == kind and k.startswith(prefix)}

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_signals() -> tuple[Signals, int]:
    """Listen on a free loopback UDP port; return the receiver and the port."""
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(Signals, local_addr=("127.0.0.1", 0))
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return proto, sock.getsockname()[1]
