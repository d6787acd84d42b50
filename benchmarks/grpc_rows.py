"""gRPC rows of the send and stream scenarios: scoped-a2a's gRPC binding on hypercorn (trio and
asyncio, ``serve --grpc``) beside the official a2a-sdk's ``grpc.aio`` server, driven by the same
grpcio client (``grpc.aio`` in the generator's loop, one channel = one HTTP/2 connection per
system, calls multiplexed on it).

Each system is found from its agent card's GRPC interface, as an A2A client would. Figures:
blocking ``SendMessage`` calls/s and latency at 1 and 64 calls in flight (scenario 1); agent
events/s of ``SendStreamingMessage`` at 1 and 16 streams, and the time from a cancelled call
(the client's RST_STREAM) until the agent observes its cancellation (scenario 2).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from .core import Bench, percentile
from .loadgen import connect, http_request
from .systems import SCOPED_GRPC, SDK_GRPC, ServerProcess, System

SCOPED_ROW = "scoped-a2a gRPC"
SDK_ROW = "a2a-sdk gRPC"
METADATA = (("a2a-version", "1.0"),)
CANCEL_AGENT_SECONDS = 5


def _row(system: System) -> tuple[str, str]:
    """(row name, role): scoped's gRPC rows sit beside its JSON-RPC subject rows."""
    return (SCOPED_ROW, "control") if system.kind == "scoped" else (SDK_ROW, "peer")


async def grpc_target(port: int) -> str:
    """The GRPC interface URL of the card served on ``port``."""
    async with await connect(port) as conn:
        status, body = await conn.request(http_request(
            port, None, method="GET", path="/.well-known/agent-card.json"))
    card = json.loads(body)
    for interface in card.get("supportedInterfaces", []):
        if interface.get("protocolBinding") == "GRPC":
            return str(interface["url"])
    raise RuntimeError(f"the card on port {port} lists no GRPC interface (status {status})")


def _request(text: str) -> Any:
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    return SendMessageRequest(message=Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                                              parts=[Part(text=text)]))


async def _stub(target: str) -> tuple[Any, Any]:
    import grpc
    from a2a.types.a2a_pb2_grpc import A2AServiceStub

    channel = grpc.aio.insecure_channel(target)
    return channel, A2AServiceStub(channel)


async def send_rows(bench: Bench, concurrency: tuple[int, ...]) -> None:
    """Scenario 1's gRPC rows (``rps_c*``, ``p50_c*``, ``p99_c*``)."""
    async with bench.servers([*SCOPED_GRPC, *SDK_GRPC]) as running:
        for system, proc in running.items():
            await _send(bench, system, proc, concurrency)


async def _send(bench: Bench, system: System, proc: ServerProcess,
                concurrency: tuple[int, ...]) -> None:
    from a2a.types.a2a_pb2 import TASK_STATE_COMPLETED

    row, role = _row(system)
    label = f"{row} / {system.server}"
    channel, stub = await _stub(await grpc_target(proc.port))
    try:
        for c in concurrency:
            latencies: list[float] = []
            wrong = [0]

            async def caller(until: float, record: bool, latencies: list[float] = latencies,
                             wrong: list[int] = wrong) -> None:
                while time.perf_counter() < until:
                    t0 = time.perf_counter()
                    answer = await stub.SendMessage(_request("echo hello"), metadata=METADATA)
                    if answer.task.status.state != TASK_STATE_COMPLETED:
                        wrong[0] += 1
                    elif record:
                        latencies.append(time.perf_counter() - t0)

            window = bench.sizes.duration
            for duration, record in ((bench.sizes.warmup, False), (window, True)):
                until = time.perf_counter() + duration
                cpu = proc.cpu()
                async with asyncio.timeout(duration + 60), asyncio.TaskGroup() as tg:
                    for _ in range(c):
                        tg.create_task(caller(until, record))
            srv = (proc.cpu() - cpu) / window
            if wrong[0]:
                bench.fail(f"{label} c={c}: {wrong[0]} answers were not a completed task")
            if not latencies:
                bench.fail(f"{label} c={c}: no answer completed")
                continue
            rps = len(latencies) / window
            p50, p99 = percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3
            bench.record(row, system.server, f"rps_c{c}", rps, "req/s", role=role)
            bench.record(row, system.server, f"p50_c{c}", p50, "ms", role=role)
            bench.record(row, system.server, f"p99_c{c}", p99, "ms", role=role)
            if c == 64:
                bench.record(row, system.server, "server_cpu_c64", srv, "cores", role=role)
            bench.progress(f"{label:32} c={c:<3} {rps:7.0f} req/s  p50 {p50:6.2f} ms  "
                           f"p99 {p99:6.2f} ms  server CPU {srv:.2f}")
    finally:
        await channel.close()


async def stream_rows(bench: Bench, events: int, concurrent: int) -> None:
    """Scenario 2's gRPC rows (``events_per_s_c1``, ``events_per_s_c<concurrent>``) and the
    hang-up to cancel time of a cancelled streaming call (``cancel_p50``, ``cancel_p99``)."""
    async with bench.servers([*SCOPED_GRPC, *SDK_GRPC]) as running:
        for n, (system, proc) in enumerate(running.items()):
            row, role = _row(system)
            channel, stub = await _stub(await grpc_target(proc.port))
            try:
                await _stream(bench, system, stub, row, role, events, concurrent)
                await _cancel(bench, system, stub, row, role, f"g{n}")
            finally:
                await channel.close()


async def _one_stream(stub: Any, events: int, window: tuple[float, float] | None = None
                      ) -> tuple[int, int, float]:
    """(agent events, events inside ``window``, seconds) of one ``stream N`` call."""
    seen = inside = 0
    t0 = time.monotonic()
    async for event in stub.SendStreamingMessage(_request(f"stream {events}"),
                                                 metadata=METADATA):
        if event.WhichOneof("payload") == "artifact_update":
            seen += 1
            if window is not None and window[0] <= time.monotonic() <= window[1]:
                inside += 1
    return seen, inside, time.monotonic() - t0


async def _stream(bench: Bench, system: System, stub: Any, row: str, role: str, events: int,
                  concurrent: int) -> None:
    label = f"{row} / {system.server}"
    total = seconds = 0.0
    for i in range(bench.sizes.stream_runs + 1):
        seen, _, took = await _one_stream(stub, events)
        if seen != events:
            bench.fail(f"{label}: a stream carried {seen} of {events} events")
            return
        if i:  # the first one warms up
            total, seconds = total + seen, seconds + took
    rate = total / seconds
    start = time.monotonic() + 0.2
    window = (start, start + bench.sizes.stream_duration)
    counted = [0]

    async def caller() -> None:
        while time.monotonic() < window[1]:
            _, inside, _ = await _one_stream(stub, events, window)
            counted[0] += inside

    async with asyncio.timeout(bench.sizes.stream_duration + 60), asyncio.TaskGroup() as tg:
        for _ in range(concurrent):
            tg.create_task(caller())
    many = counted[0] / bench.sizes.stream_duration
    bench.record(row, system.server, "events_per_s_c1", rate, "events/s", role=role)
    bench.record(row, system.server, f"events_per_s_c{concurrent}", many, "events/s", role=role)
    bench.progress(f"{label:32} {rate:7.0f} events/s (c=1)  {many:7.0f} events/s "
                   f"(c={concurrent})")


async def _cancel(bench: Bench, system: System, stub: Any, row: str, role: str,
                  prefix: str) -> None:
    """Cancel streaming calls whose agent has started; time until it observes the cancel."""
    label = f"{row} / {system.server}"
    delays: list[float] = []
    misses = 0
    for i in range(bench.sizes.hangup_runs):
        key = f"{prefix}-{i}"
        call = stub.SendStreamingMessage(_request(f"slow {key} {CANCEL_AGENT_SECONDS}"),
                                         metadata=METADATA)
        reader = asyncio.ensure_future(call.read())  # sends the request, reads the task
        if await bench.signals.wait("start", key, 10.0) is None:
            call.cancel()
            bench.fail(f"{label}: the agent never started")
            return
        hung_up = time.monotonic()
        call.cancel()  # RST_STREAM CANCEL
        reader.cancel()
        seen = await bench.signals.wait("cancel", key, bench.sizes.hangup_wait)
        if seen is None:
            misses += 1
            if not delays and misses >= bench.sizes.give_up_cancel:
                break
        else:
            delays.append(seen - hung_up)
    if not delays:
        bench.record(row, system.server, "cancel_p50", None, "ms", role=role, note="never")
        bench.record(row, system.server, "cancel_p99", None, "ms", role=role, note="never")
        bench.progress(f"{label:32} cancelled call: never cancelled ({misses} runs)")
    else:
        p50, p99 = percentile(delays, 50) * 1e3, percentile(delays, 99) * 1e3
        bench.record(row, system.server, "cancel_p50", p50, "ms", role=role)
        bench.record(row, system.server, "cancel_p99", p99, "ms", role=role)
        bench.progress(f"{label:32} cancelled call -> agent cancelled: p50 {p50:6.2f} ms  "
                       f"p99 {p99:6.2f} ms  ({len(delays)}/{len(delays) + misses})")
    if system.kind == "scoped" and misses:
        bench.fail(f"{label}: {misses} cancelled calls did not cancel their run")
