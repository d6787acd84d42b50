"""The SSE writer's one deadline: write timeouts and keep-alive rests (server/sse.py).

Driven directly with a fake ``send``, on both backends: a write that makes no progress for the
write timeout ends the block with SlowConsumer; a rest that passes while the stream waits ends it
quietly; a rest that passed before the next write began ends it quietly with nothing written (the
caller reads again after its keep-alive, so nothing is lost or repeated); and a write disarms the
rest, so a stream that keeps writing never rests.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from scoped_a2a.server.sse import SlowConsumer, SSEWriter

pytestmark = pytest.mark.anyio


class Sink:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.stall = False

    async def send(self, message: dict[str, Any]) -> None:
        if self.stall:
            await anyio.sleep_forever()  # a client that stopped reading
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])


async def test_a_rest_that_passes_while_waiting_ends_the_block_quietly() -> None:
    sink = Sink()
    writer = SSEWriter(sink.send, write_timeout=5)
    await writer.event(b"{}", 1)
    with anyio.fail_after(2):
        with writer.write_deadline():
            writer.rest(0.05)
            await anyio.sleep_forever()  # the stream waiting for its next event
    await writer.keepalive()  # what the caller writes next, under no block
    assert sink.bodies[-1] == b": keep-alive\n\n"


async def test_a_rest_already_over_when_a_write_begins_writes_nothing() -> None:
    sink = Sink()
    writer = SSEWriter(sink.send, write_timeout=5)
    await writer.event(b"{}", 1)
    written = len(sink.bodies)
    with writer.write_deadline():
        writer.rest(-1.0)  # passed already: no keep-alive time left
        await writer.event(b'{"late":true}', 2)  # never reached: the block has ended
        pytest.fail("the block went on after its rest was over")
    assert len(sink.bodies) == written


async def test_a_write_disarms_the_rest_and_a_stuck_write_is_a_slow_consumer() -> None:
    sink = Sink()
    writer = SSEWriter(sink.send, write_timeout=0.2)
    await writer.event(b"{}", 1)
    with anyio.fail_after(3), pytest.raises(SlowConsumer), writer.write_deadline():
        writer.rest(0.05)
        await writer.event(b"{}", 2)  # a write: the rest no longer applies
        await anyio.sleep(0.1)  # longer than the rest: no quiet end now
        sink.stall = True
        await writer.event(b"{}", 3)  # the client stops reading: the write timeout
    assert len(sink.bodies) == 2  # events 1 and 2; the stuck third never went out


async def test_a_keep_alive_the_client_does_not_take_is_a_slow_consumer() -> None:
    sink = Sink()
    writer = SSEWriter(sink.send, write_timeout=0.2)
    await writer.event(b"{}", 1)
    with anyio.fail_after(2):
        with writer.write_deadline():
            writer.rest(0.01)
            await anyio.sleep_forever()
        sink.stall = True  # the client stopped reading while the stream was idle
        with pytest.raises(SlowConsumer):
            await writer.keepalive()  # outside any block: bounded by its own deadline


async def test_a_hang_up_while_resting_is_a_cancellation_not_a_quiet_end() -> None:
    sink = Sink()
    writer = SSEWriter(sink.send, write_timeout=5)
    await writer.event(b"{}", 1)
    with anyio.CancelScope() as request:  # the request's scope, cancelled by the watcher
        with writer.write_deadline():
            writer.rest(10)
            request.cancel()
            await anyio.sleep_forever()
        pytest.fail("the hang-up was taken for a rest")
    assert request.cancelled_caught
