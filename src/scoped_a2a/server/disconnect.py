"""The disconnect watcher: the one reader of ``receive()`` once the body has been read.

hypercorn delivers ``http.disconnect`` once, within a millisecond of the client dropping, and a
second ``receive()`` after it blocks forever; ``send()`` after a drop does not raise. So exactly one
task must keep reading, and it must turn the disconnect into cancellation: it cancels the request's
scope, which releases every hold the request has on runs (ending interactive ones) and stops its
stream writer.

A disconnect cannot cut an answer already being written: the app writes the final answer
shielded (on trio, hypercorn emits ``http.disconnect`` from inside that very ``send()`` for a
``Connection: close`` or half-closed client). A half-close counts as a hang-up; a blocking send
still answers it afterwards (``_AsgiOutput.answer_after_hangup``, docs/connections.md).
"""

from __future__ import annotations

import anyio

from .asgi import Receive


async def watch_disconnect(receive: Receive, request_scope: anyio.CancelScope) -> None:
    """Wait for ``http.disconnect`` and cancel ``request_scope``.

    Runs as a sibling of the handler in the request's task group; the handler cancels it (by
    cancelling the group) once the response is complete. Other messages (none are expected
    after the body) are ignored.
    """
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            request_scope.cancel()
            return
