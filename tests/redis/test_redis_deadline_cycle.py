"""A Redis command past its deadline leaves nothing of its own to the cyclic collector
(store/redis/connection.py, ``RedisConnection.call``).

``call`` bounded each command with ``anyio.fail_after``. On Python 3.12+ the TimeoutError that
raises out of its generator left anyio's frames (``fail_after``, ``fail_at``, contextlib's
``__exit__``) in a reference cycle, and with them, through ``f_back``, ``call``'s own frame and
what it held (the command): measured on 3.13, both backends, and on 3.11 with trio. The
deadline is now the package's ``fail_after`` (scoped_a2a/timeouts.py: a cancel scope's, whose
exit makes no cycle; tests/test_timeouts.py checks it and its other sites). (On trio a cycle
of coredis' reader task still reaches ``call``'s frame: see the test.) Checked with the
collector off
(as tests/test_exception_cycles.py) against a real redis-server, a ``BLPOP`` that never
returns timing out; the error the caller gets says how long it waited.
"""

from __future__ import annotations

import anyio
import pytest

from scoped_a2a.protocol.errors import ServerUnavailable
from scoped_a2a.store.redis.connection import RedisConnection

from ..test_exception_cycles import collector_off
from ..test_timeouts import frames
from .conftest import RedisServer

pytestmark = pytest.mark.anyio


async def test_a_command_past_its_deadline_leaves_no_cycle(
        redis_server: RedisServer, anyio_backend: str) -> None:
    async with RedisConnection.open(redis_server.url, op_timeout=0.2) as conn:
        await conn.call(lambda: conn.client.ping())  # connected: the deadline is the command's
        for attempt in range(2):  # the first may meet first-use caches
            with collector_off() as found:
                with pytest.raises(ServerUnavailable) as raised:
                    await conn.call(lambda: conn.client.blpop(["never-pushed"], timeout=0))
                message = str(raised.value)
                del raised
            # On trio, coredis' reader task, cancelled as the command is given up, makes a
            # cycle of its own (anyio's socket-error conversion holds a Cancelled whose
            # context is the deadline's), which reaches ``call``'s frame: there, on 3.11 as
            # on 3.13, only the deadline's own frames are checked.
            left = frames(found, *(["call"] if anyio_backend == "asyncio" else []))
            assert left == [], f"attempt {attempt}: left to the cycle collector: {left}"
        assert "no answer within 0.2 s" in message, message
        with anyio.fail_after(5):
            assert await conn.call(lambda: conn.client.ping())  # the connection still serves
