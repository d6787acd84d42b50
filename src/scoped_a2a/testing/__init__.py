"""Test your own A2A clients and trajectory followers against an agent that misbehaves.

:class:`FaultyProxy` sits in front of any A2A agent (in this process or another) and breaks the
requests you choose, by JSON-RPC method: it closes the connection, answers 500 or 404, never
answers, behaves until the task has ended and then is gone, or fails at random. ``vanish()``
makes the whole agent disappear at once (the port refuses connections, open ones are cut).
:func:`faulty_agent` serves an agent in this process behind such a proxy, in one ``async with``::

    from scoped_a2a.testing import faulty_agent

    async with faulty_agent(my_agent, "close") as (url, proxy, app):
        async with A2AClient(url) as client:
            ...   # every trajectory read of a follower has its connection closed
        assert proxy.requests_after(turn_ended) <= 1

It runs on asyncio and on trio, on loopback. ``docs/testing.md`` has the details.
"""

from .agent import faulty_agent
from .proxy import FAULTS, FOLLOWER_METHODS, FaultyProxy, listen

__all__ = ["FAULTS", "FOLLOWER_METHODS", "FaultyProxy", "faulty_agent", "listen"]
