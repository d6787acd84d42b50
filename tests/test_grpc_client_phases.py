"""The gRPC client against a fake HTTP/2 peer (h2 on an AnyIO listener) that stalls at each
phase of a call, in the manner of httpcore's cancellation tests: a cancelled call returns at
once and resets its stream (the peer sees RST_STREAM CANCEL), nothing is left reading, and a
GOAWAY sends the next call to a new connection. Both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from a2a.types import a2a_pb2 as pb

from scoped_a2a import A2AClient
from scoped_a2a.client.card import decode_card
from scoped_a2a.client.errors import AgentUnreachable
from scoped_a2a.protocol.grpc.framing import frame

pytestmark = pytest.mark.anyio


@dataclass
class Peer:
    """What the fake peer saw: the events of every connection."""

    events: list[Any] = field(default_factory=list)
    connections: int = 0
    closed: int = 0
    """Connections the client closed (the peer read their end)."""
    open: int = 0


Behaviour = Callable[[h2.connection.H2Connection, Any, int], bytes | None]
"""Given the peer's h2 connection, an event and the connection's number: what to do (the
peer's h2 queues frames; return b"close" to close the connection)."""


def answer_get_task(conn: h2.connection.H2Connection, event: Any, n: int) -> bytes | None:
    if isinstance(event, h2.events.StreamEnded):
        conn.send_headers(event.stream_id, [(":status", "200"),
                                            ("content-type", "application/grpc")])
        task = pb.Task(id="t1", context_id="c1",
                       status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED))
        conn.send_data(event.stream_id, frame(task.SerializeToString()))
        conn.send_headers(event.stream_id, [("grpc-status", "0")], end_stream=True)
    return None


@asynccontextmanager
async def fake_peer(behaviour: Behaviour) -> AsyncIterator[tuple[Peer, A2AClient]]:
    peer = Peer()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        peer.connections += 1
        peer.open += 1
        n = peer.connections
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        await stream.send(conn.data_to_send())
        try:
            while True:
                data = await stream.receive()
                for event in conn.receive_data(data):
                    peer.events.append((n, event))
                    if behaviour(conn, event, n) == b"close":
                        await stream.send(conn.data_to_send())
                        await stream.aclose()
                        return
                await stream.send(conn.data_to_send())
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            peer.closed += 1
        finally:
            peer.open -= 1

    card = decode_card(f'{{"name": "fake", "supportedInterfaces": [{{"url": "127.0.0.1:{port}",'
                       f' "protocolBinding": "GRPC", "protocolVersion": "1.0"}}]}}'.encode())
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            async with A2AClient(f"http://127.0.0.1:{port}/", card=card, timeout=5) as client:
                yield peer, client
            with anyio.move_on_after(2):  # the client closed: the peer reads its end
                while peer.open:
                    await anyio.sleep(0.01)
        finally:
            tg.cancel_scope.cancel()


def resets(peer: Peer) -> list[int]:
    return [e.error_code for _, e in peer.events if isinstance(e, h2.events.StreamReset)]


@pytest.mark.parametrize("phase", ["no answer", "headers only", "part of a message"])
async def test_a_call_cancelled_at_each_phase_resets_its_stream(phase: str) -> None:
    def stall(conn: h2.connection.H2Connection, event: Any, n: int) -> bytes | None:
        if isinstance(event, h2.events.StreamEnded) and phase != "no answer":
            conn.send_headers(event.stream_id, [(":status", "200"),
                                                ("content-type", "application/grpc")])
            if phase == "part of a message":
                conn.send_data(event.stream_id, frame(b"x" * 1000)[:500])
        return None

    async with fake_peer(stall) as (peer, client):
        began = anyio.current_time()
        with anyio.move_on_after(0.3) as scope:
            await client.get_task("t1")
        assert scope.cancelled_caught and anyio.current_time() - began < 1.5
        with anyio.fail_after(5):
            while not resets(peer):
                await anyio.sleep(0.01)
        assert resets(peer) == [h2.errors.ErrorCodes.CANCEL], peer.events
        assert client._grpc is not None and client._grpc._conn is not None
        assert not client._grpc._conn._reading and not client._grpc._conn._pumping
    assert peer.closed == 1, "the client's aclose did not close its connection"


async def test_a_goaway_sends_the_next_call_to_a_new_connection() -> None:
    def first_then_goaway(conn: h2.connection.H2Connection, event: Any,
                          n: int) -> bytes | None:
        answer_get_task(conn, event, n)
        if isinstance(event, h2.events.StreamEnded) and n == 1:
            conn.close_connection(last_stream_id=event.stream_id)
            return b"close"
        return None

    async with fake_peer(first_then_goaway) as (_, client):
        with anyio.fail_after(10):
            assert (await client.get_task("t1")).id == "t1"
            assert (await client.get_task("t1")).id == "t1"  # refused on 1, sent on 2
        assert client._grpc is not None and client._grpc.connections == 2


async def test_a_peer_that_closes_without_answering_is_unreachable() -> None:
    def hang_up(conn: h2.connection.H2Connection, event: Any, n: int) -> bytes | None:
        return b"close" if isinstance(event, h2.events.StreamEnded) else None

    async with fake_peer(hang_up) as (_, client):
        with anyio.fail_after(10), pytest.raises(AgentUnreachable, match="closed"):
            await client.get_task("t1")
