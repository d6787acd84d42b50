"""EventStream.protect_first: a reader cancelled before the stream's first event still gets
that event folded in (it names the task the abandon rule must cancel), without a broken read.

A fake event source whose read the test releases: deterministic on both backends, for the two
moments a cancellation can land (before the read starts, and while it is in flight)."""

from __future__ import annotations

import anyio
import pytest

from scoped_a2a.client.streams import EventStream, RawEvent
from scoped_a2a.client.wire import CODECS, StreamEvent
from scoped_a2a.protocol.errors import A2AError

pytestmark = pytest.mark.anyio

TASK = b'{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}'


class Source:
    """Hands out one task event once ``release`` is set; records whether a read was cut."""

    where = "fake://agent"

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.reading = anyio.Event()
        self.cut = False
        self.reads = 0

    async def receive(self) -> list[RawEvent | A2AError] | None:
        self.reads += 1
        self.reading.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cut = True
            raise
        return [RawEvent(TASK, 0)]

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("when", ["before-the-read", "during-the-read"])
async def test_a_cancelled_reader_still_gets_the_first_event(when: str) -> None:
    source = Source()
    events = EventStream(source, CODECS["1.0"])  # type: ignore[arg-type]
    seen: list[StreamEvent] = []
    events.observe = seen.append
    events.protect_first = 2.0
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:
                if when == "before-the-read":
                    scope.cancel()

                    async def release_later() -> None:
                        await anyio.sleep(0.05)
                        source.release.set()
                    tg.start_soon(release_later)
                else:
                    async def cancel_once_reading() -> None:
                        await source.reading.wait()
                        scope.cancel()
                        await anyio.sleep(0.05)  # the read stays in flight a moment
                        source.release.set()
                    tg.start_soon(cancel_once_reading)
                await events.__anext__()
                pytest.fail("the cancelled read handed out an event")
    assert scope.cancelled_caught
    assert not source.cut and source.reads == 1
    assert [e.kind for e in seen] == ["task"]  # observed at once, for the owner
    handed = await events.__anext__()  # still pending, and not observed twice
    assert handed.kind == "task" and len(seen) == 1


async def test_without_protection_a_cancel_cuts_the_read() -> None:
    source = Source()
    events = EventStream(source, CODECS["1.0"])  # type: ignore[arg-type]
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            async def cancel_once_reading() -> None:
                await source.reading.wait()
                scope.cancel()
            tg.start_soon(cancel_once_reading)
            await events.__anext__()
    assert scope.cancelled_caught and source.cut


async def test_the_grace_bounds_a_read_that_never_ends() -> None:
    source = Source()
    events = EventStream(source, CODECS["1.0"])  # type: ignore[arg-type]
    events.protect_first = 0.2
    start = anyio.current_time()
    with anyio.fail_after(5), anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            async def cancel_once_reading() -> None:
                await source.reading.wait()
                scope.cancel()
            tg.start_soon(cancel_once_reading)
            await events.__anext__()
    took = anyio.current_time() - start
    assert scope.cancelled_caught and source.cut
    assert 0.15 < took < 2.0, took
