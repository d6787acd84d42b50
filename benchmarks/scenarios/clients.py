"""Scenario 18: the clients. Our ``A2AClient`` and the a2a-sdk's own client (``ClientFactory``),
each against the same scoped-a2a server and the same a2a-sdk server.

Both clients run in this (asyncio) process, one after the other, over JSON-RPC. Figures: blocking
sends per second with 1 and 16 in flight (``echo``), stream events per second (``stream N``,
one stream at a time; and the client's CPU per event: this process's CPU time over them, which
the machine's load hardly moves), and the time from a caller giving up mid-turn to the remote
agent observing its cancellation (``slow KEY 5``; the agent stamps it on the side channel; the
caller gives up as soon as the agent has started, often before the task's first event reached
it: our client then lets that read finish, to learn the task it must cancel). Our client gives
up as a ``Step`` turn cancelled by its scope (the abandon rule sends CancelTask where the
server does not cancel on a hang-up); the a2a-sdk's client by cancelling the task that iterates
its ``send_message``. "never": no run was cancelled within the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from ..core import Bench, Metric, Scenario, percentile
from ..systems import System

SERVERS = [System("scoped", "hypercorn-asyncio"), System("sdk", "uvicorn")]
OURS, SDK = "scoped-a2a A2AClient", "a2a-sdk ClientFactory"
OURS_TRIO = "scoped-a2a A2AClient (trio)"
STREAM_EVENTS = 200
SEND_ROUNDS = 4
SLOW_SECONDS = 5


class Clients(Scenario):
    name = "clients"
    number = 18
    title = "clients (our A2AClient and the a2a-sdk's, against the same servers)"
    metrics = (
        Metric("send_c1", "sends/s c=1", "sends/s", "higher", True, "{:.0f}"),
        Metric("send_c16", "sends/s c=16", "sends/s", "higher", True, "{:.0f}"),
        Metric("stream_eps", "stream events/s", "events/s", "higher", True, "{:.0f}"),
        Metric("stream_cpu", "client CPU us/event", "us", "lower", True, "{:.0f}"),
        Metric("cancel_p50", "give-up to cancel p50 ms", "ms", "lower", False, "{:.1f}"),
        Metric("cancel_p99", "give-up to cancel p99 ms", "ms", "lower", False, "{:.1f}"),
    )
    notes = ("Rows are clients; the column after the client is the server they call. Ratios: "
             "our client over the a2a-sdk's on the same server. 'give-up to cancel': from the "
             "caller giving up mid-turn to the agent seeing its cancellation; 'never': the "
             "a2a-sdk's client only hangs up, and the a2a-sdk server does not cancel on that.")

    async def run(self, bench: Bench) -> None:
        async with bench.servers(SERVERS) as running:
            for system, proc in running.items():
                where = f"to {system.name} / {system.server}"
                clients = [c for c in (OURS, SDK) if bench.wants(f"{c} / {where}")]
                async with contextlib.AsyncExitStack() as stack:
                    kits: dict[str, Kit] = {}
                    for client in clients:
                        http = await stack.enter_async_context(httpx.AsyncClient(
                            timeout=None, limits=httpx.Limits(max_connections=64)))
                        kits[client] = await (_ours if client == OURS else _sdk)(proc.url, http)
                    await self.send_rates(bench, kits, where, proc.url)
                    for client, kit in kits.items():
                        await self.measure(bench, client, where, kit)

    async def send_rates(self, bench: Bench, kits: dict[str, Kit], where: str,
                         url: str) -> None:
        """Blocking sends per second, the clients taking turns in rounds (A B C, C B A, ...) on
        the same server: a change in the machine's load or the server's state during the run
        falls on all alike (measured one after the other, the first client's 5 s and the
        second's saw different machines: c=1 ratios of 0.72 to 1.64 between runs). Our client
        on trio takes its turns too (each in a trio run of its own, in a thread, with a client
        of its own warmed for a fifth of a second: ``control`` rows)."""
        rounds = 2 if bench.sizes.quick else SEND_ROUNDS
        rates: dict[str, Callable[[int, float, float], Awaitable[tuple[int, float]]]] = {
            client: functools.partial(_rate, kit[0]) for client, kit in kits.items()}
        if OURS in kits:
            rates[OURS_TRIO] = functools.partial(_trio_rate, url)
        for c in (1, 16):
            for rate in rates.values():
                await rate(c, bench.sizes.warmup, 0.0)
            done = dict.fromkeys(rates, 0)
            took = dict.fromkeys(rates, 0.0)
            for r in range(rounds):
                for client in (list(rates) if r % 2 == 0 else list(reversed(rates))):
                    n, seconds = await rates[client](c, 0.0, bench.sizes.duration / rounds)
                    done[client] += n
                    took[client] += seconds
            per_s = {client: done[client] / took[client] for client in rates}
            for client, value in per_s.items():
                role = {OURS: "subject", OURS_TRIO: "control"}.get(client, "peer")
                bench.record(client, where, f"send_c{c}", value, "sends/s", role=role)
            if SDK in per_s and OURS in per_s:
                bench.progress(f"sends c={c} {where}: ours over the a2a-sdk's client "
                               f"{per_s[OURS] / per_s[SDK]:.2f} (asyncio), "
                               f"{per_s[OURS_TRIO] / per_s[SDK]:.2f} (trio)")

    async def measure(self, bench: Bench, client: str, where: str, kit: Kit) -> None:
        role = "subject" if client == OURS else "peer"
        _, stream, give_up = kit
        runs = max(3, bench.sizes.stream_runs // 3)
        await stream(STREAM_EVENTS)  # warm: the server's first stream costs ~12 % more
        start, cpu = time.perf_counter(), time.process_time()
        events = 0
        for _ in range(runs):
            events += await stream(STREAM_EVENTS)
        eps = events / (time.perf_counter() - start)
        # This process runs only the client (the servers are processes of their own): its
        # CPU per event is the client's work, a figure the machine's load hardly moves.
        cpu_us = (time.process_time() - cpu) / max(events, 1) * 1e6
        bench.record(client, where, "stream_eps", eps, "events/s", role=role)
        bench.record(client, where, "stream_cpu", cpu_us, "us", role=role)
        delays = await self.cancels(bench, give_up)
        if delays:
            p50, p99 = percentile(delays, 50) * 1e3, percentile(delays, 99) * 1e3
            bench.record(client, where, "cancel_p50", p50, "ms", role=role)
            bench.record(client, where, "cancel_p99", p99, "ms", role=role)
            said = f"cancel p99 {p99:.1f} ms"
        else:
            for key in ("cancel_p50", "cancel_p99"):
                bench.record(client, where, key, None, "ms", role=role, note="never")
            said = "never cancelled"
        bench.progress(f"{client:24} {where:32}: {eps:7.0f} events/s, {said}")

    async def cancels(self, bench: Bench, give_up: Callable[[str], Awaitable[None]]
                      ) -> list[float]:
        delays: list[float] = []
        misses = 0
        for i in range(bench.sizes.hangup_runs):
            key = f"cl-{uuid.uuid4().hex[:8]}-{i}"
            work = asyncio.ensure_future(give_up(key))
            if await bench.signals.wait("start", key, 10.0) is None:
                work.cancel()
                bench.fail(f"the agent never started {key}")
                return delays
            gave_up = time.monotonic()
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            seen = await bench.signals.wait("cancel", key, bench.sizes.hangup_wait)
            if seen is None:
                misses += 1
                if not delays and misses >= bench.sizes.give_up_cancel:
                    break
            else:
                delays.append(seen - gave_up)
        return delays


async def _rate(send: Callable[[], Awaitable[None]], concurrency: int, warmup: float,
                duration: float) -> tuple[int, float]:
    """Sends completed with ``concurrency`` in flight over about ``duration`` seconds after
    ``warmup`` seconds, and the seconds they took (from the warm-up's end to the last one)."""
    done = 0
    counting = False
    stop = time.perf_counter() + warmup + duration

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await send()
            if counting:
                done += 1

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    await asyncio.sleep(warmup)
    counting = True
    began = time.perf_counter()
    await asyncio.gather(*workers)
    return done, time.perf_counter() - began


async def _trio_rate(url: str, concurrency: int, warmup: float, duration: float
                     ) -> tuple[int, float]:
    """:func:`_rate` for our client on trio: one trio run in a worker thread, with its own
    client (card fetched, warmed at least 0.2 s), so the asyncio loop here only waits."""
    import anyio
    import trio

    from scoped_a2a import A2AClient

    async def main() -> tuple[int, float]:
        async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=64)
                                     ) as http, A2AClient(url, http=http, timeout=None) as client:
            await client.card()
            done, counting = 0, False
            stop = time.perf_counter() + max(warmup, 0.2) + duration

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < stop:
                    await client.send("echo hi")
                    done += counting

            async with anyio.create_task_group() as tg:
                for _ in range(concurrency):
                    tg.start_soon(worker)
                await anyio.sleep(max(warmup, 0.2))
                counting, began = True, time.perf_counter()
            return done, time.perf_counter() - began

    return await asyncio.to_thread(trio.run, main)


Kit = tuple[Callable[[], Awaitable[None]], Callable[[int], Awaitable[int]],
            Callable[[str], Awaitable[None]]]


async def _ours(url: str, http: httpx.AsyncClient) -> Kit:
    from scoped_a2a import A2AClient, Step

    client = A2AClient(url, http=http, timeout=None)
    await client.card()

    async def send() -> None:
        await client.send("echo hi")

    async def stream(n: int) -> int:
        count = 0
        async with client.stream(f"stream {n}") as events:
            async for item in events:
                count += item.kind == "artifactUpdate"
        return count

    async def give_up(key: str) -> None:
        async with Step(client, follow=False) as step:
            await step.turn(f"slow {key} {SLOW_SECONDS}")

    return send, stream, give_up


async def _sdk(url: str, http: httpx.AsyncClient) -> Kit:
    from a2a.client import ClientConfig, ClientFactory
    from a2a.helpers import new_text_message
    from a2a.types.a2a_pb2 import Role, SendMessageRequest

    blocking = await ClientFactory(ClientConfig(streaming=False, httpx_client=http)
                                   ).create_from_url(url)
    streaming = await ClientFactory(ClientConfig(streaming=True, httpx_client=http)
                                    ).create_from_url(url)

    def request(text: str) -> Any:
        return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))

    async def send() -> None:
        async for _ in blocking.send_message(request("echo hi")):
            pass

    async def stream(n: int) -> int:
        count = 0
        async for answer in streaming.send_message(request(f"stream {n}")):
            count += answer.HasField("artifact_update")
        return count

    async def give_up(key: str) -> None:
        async for _ in streaming.send_message(request(f"slow {key} {SLOW_SECONDS}")):
            pass

    return send, stream, give_up
