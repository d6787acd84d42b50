"""Scenario 8: subscribers that stop reading; what they cost and how soon they are closed.

A task is started without waiting (``returnImmediately``) whose message carries 1 MiB of
metadata, so the snapshot every subscription starts with is over 1 MiB; its agent (``slow``)
then sleeps. N raw sockets with a 4 KiB receive buffer each send ``SubscribeToTask`` and never
read a byte. The server runs with ``--stream-write-timeout 3``. Reported: the server's resident
memory before the subscriptions and its peak while they are stuck (the growth is what N stuck
clients of one big task cost: targets <= 64 MiB for 500), the growth of the kernel's TCP
buffers (machine-wide, /proc/net/sockstat), and the time from the last
subscription sent until the server has closed them all (target <= timeout + 5 s), seen as the
server's open file descriptors falling back to where they were (a client that never reads cannot
tell: the kernel's abort sends it no reset until it sends or reads).

Only scoped-a2a under ``serve`` (hypercorn trio and asyncio): the stall timeout is set on the
listening socket ``serve`` creates (``TCP_USER_TIMEOUT``), which other servers do not have.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time

from ..core import Bench, Metric, Scenario
from ..loadgen import connect, http_request, message_params, rpc_body
from ..systems import ServerProcess, System

WRITE_TIMEOUT = 3.0
"""The servers' ``--stream-write-timeout`` here."""
PAD = 1 << 20
RCVBUF = 4096
OPTIONS = ("--stream-write-timeout", f"{WRITE_TIMEOUT:g}")
SYSTEMS = [System("scoped", "hypercorn-trio", OPTIONS),
           System("scoped", "hypercorn-asyncio", OPTIONS)]


class SlowReaders(Scenario):
    name = "slowreaders"
    number = 8
    title = "subscribers that stop reading (memory, and time until the server closes them)"
    metrics = (
        Metric("subscribers", "stuck subscribers", "count", None, False, "{:.0f}"),
        Metric("rss_before", "RSS before MiB", "MiB", None, False, "{:.0f}"),
        Metric("rss_added", "RSS added MiB", "MiB", "lower", False, "{:.1f}"),
        Metric("tcp_added", "kernel TCP MiB added", "MiB", "lower", False, "{:.0f}"),
        Metric("closed_after", "all closed after s", "s", "lower", False, "{:.1f}"),
        Metric("closed", "closed", "fraction", None, False, "{:.0%}"),
    )
    notes = (f"A task with a 1 MiB message; each subscriber has a {RCVBUF}-byte receive buffer and "
             f"never reads. --stream-write-timeout {WRITE_TIMEOUT:g}: the targets are RSS added "
             f"<= 64 MiB for 500 and all closed within {WRITE_TIMEOUT + 5:g} s.")

    async def run(self, bench: Bench) -> None:
        n = 50 if bench.sizes.quick else 500
        async with bench.servers(SYSTEMS) as running:
            for i, (system, proc) in enumerate(running.items()):
                await self.measure(bench, system, proc, n, f"sr{i}")

    async def measure(self, bench: Bench, system: System, proc: ServerProcess, n: int,
                      key: str) -> None:
        params = message_params(f"slow {key} 120", return_immediately=True,
                                metadata={"pad": "x" * PAD})
        async with await connect(proc.port) as conn:
            status, body = await conn.request(http_request(proc.port,
                                                           rpc_body("SendMessage", params)))
        try:
            task_id = json.loads(body)["result"]["task"]["id"]
        except (ValueError, KeyError, TypeError):
            bench.fail(f"{system.label}: could not start the task ({status}: {body[:200]!r})")
            return
        if await bench.signals.wait("start", key, 10.0) is None:
            bench.fail(f"{system.label}: the agent never started")
            return
        await asyncio.sleep(0.5)
        rss_before, fds_before, tcp_before = proc.rss(), _fds(proc), _tcp_memory()
        subscribe = http_request(proc.port, rpc_body("SubscribeToTask", {"id": task_id}),
                                 stream=True)
        loop = asyncio.get_running_loop()
        socks: list[socket.socket] = []
        try:
            for _ in range(n):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
                sock.setblocking(False)
                await loop.sock_connect(sock, ("127.0.0.1", proc.port))
                await loop.sock_sendall(sock, subscribe)
            sent = time.monotonic()
            peak, tcp_peak = proc.rss(), _tcp_memory()
            closed_after: float | None = None
            cap = WRITE_TIMEOUT + 30
            while time.monotonic() - sent < cap:
                await asyncio.sleep(0.1)
                peak, tcp_peak = max(peak, proc.rss()), max(tcp_peak, _tcp_memory())
                if _fds(proc) <= fds_before:
                    closed_after = time.monotonic() - sent
                    break
            left = max(0, _fds(proc) - fds_before)
        finally:
            for sock in socks:
                sock.close()
        added = (peak - rss_before) / (1 << 20)
        bench.record(system, None, "subscribers", n, "count")
        bench.record(system, None, "rss_before", rss_before / (1 << 20), "MiB")
        bench.record(system, None, "rss_added", added, "MiB")
        bench.record(system, None, "tcp_added", (tcp_peak - tcp_before) / (1 << 20), "MiB")
        bench.record(system, None, "closed", (n - min(left, n)) / n, "fraction")
        if closed_after is None:
            bench.record(system, None, "closed_after", None, "s", note=f"> {cap:g}")
            bench.fail(f"{system.label}: {left} of {n} stuck subscribers still open after "
                       f"{cap:g}s")
        else:
            bench.record(system, None, "closed_after", closed_after, "s")
        shown = "never" if closed_after is None else f"{closed_after:.1f}s"
        bench.progress(f"{system.label:32} N={n}: RSS {rss_before / (1 << 20):.0f} MiB "
                       f"+ {added:.1f} MiB with them stuck (kernel TCP buffers "
                       f"+{(tcp_peak - tcp_before) / (1 << 20):.0f} MiB); all closed after {shown}")


def _fds(proc: ServerProcess) -> int:
    """Open file descriptors of the server (each connection is one)."""
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


def _tcp_memory() -> int:
    """Bytes the kernel holds in TCP buffers, machine-wide (/proc/net/sockstat ``mem`` pages)."""
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE")
    return 0
