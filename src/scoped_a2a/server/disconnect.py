"""The disconnect watcher: the one reader of ``receive()`` once the body has been read.

hypercorn delivers ``http.disconnect`` once, within a millisecond of the client dropping, and a
second ``receive()`` after it blocks forever; ``send()`` after a drop does not raise. So exactly one
task must keep reading, and it must turn the disconnect into cancellation: it cancels the request's
scope, which releases every hold the request has on runs (ending interactive ones) and stops its
stream writer.

A disconnect cannot cut an answer already being written: the app writes the final answer
shielded (on trio, hypercorn emits ``http.disconnect`` from inside that very ``send()`` for a
``Connection: close`` or half-closed client). A half-close counts as a hang-up; a blocking send
still answers it afterwards (``Responder.answer_after_hangup``, docs/connections.md).
"""

from __future__ import annotations

import anyio

from .asgi import Receive


class DisconnectWatcher:
    """Waits for ``http.disconnect`` and cancels ``request_scope``; :meth:`stop` ends it.

    :meth:`run` is started as a sibling of the handler in the request's task group. Once the
    response is complete the handler calls :meth:`stop`, which cancels only the watcher's own
    scope: the watcher then returns normally. Why not cancel the whole group: on asyncio, anyio
    keeps a child task's cancellation exception in a reference cycle with its traceback, so
    every request would leave ~40 objects of cyclic garbage for the collector (a visible share
    of a small request's CPU). Other messages (none are expected after the body) are ignored.
    """

    __slots__ = ("_receive", "_request_scope", "_scope", "_stopped")

    def __init__(self, receive: Receive, request_scope: anyio.CancelScope) -> None:
        self._receive = receive
        self._request_scope = request_scope
        self._scope: anyio.CancelScope | None = None
        self._stopped = False

    async def run(self) -> None:
        with anyio.CancelScope() as scope:
            if self._stopped:  # stopped before it started
                return
            self._scope = scope
            while True:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    self._request_scope.cancel()
                    return

    def stop(self) -> None:
        """End the watcher (synchronously; it returns at its next scheduling)."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()
