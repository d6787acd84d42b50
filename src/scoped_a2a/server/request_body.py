"""Reading a request's body inside the request's cancel scope, with a refused body carried out
of that scope as data: the one shape both HTTP bindings (JSON-RPC, HTTP+JSON) share.

A binding runs everything it does for one request inside one :class:`~.closing.RequestScope`
(armed for the body's first read and, later, for a blocking send's final write), and sends the
refusal of a body (:meth:`BodyReader.refusal`) only once out of it, so a body deadline that
cancelled the scope cannot swallow the answer saying so (408). (A plain ``with`` in each
binding, not a helper that awaits the work: one coroutine level less on every request.)

Why a refusal is data (a :data:`Refusal` tuple) and not the exception: an exception kept past
its ``except`` block holds its traceback, whose frames hold the body read so far. On Python
3.12+ a coroutine frame that ends while a traceback refers to it keeps its caller's frame as
``f_back``, and the caller's frame held the exception: a reference cycle only the cyclic
collector frees. 3.13 runs that collector after 2,000 new objects (3.11: 700), so under a flood
of refused bodies hundreds of them (up to 63.5 KiB each) stayed alive at once, past the body
memory bound (test_body_hostile, test_request_scope).
"""

from __future__ import annotations

from collections.abc import Callable

from .asgi import Receive, Scope
from .body import BodyBudget, BodyRefused, BodyTooSlow, ClientGone, ServerClosing, read_body
from .closing import RequestScope

Refusal = tuple[int, bytes, list[tuple[bytes, bytes]]]
"""An answer decided before the method runs: HTTP status, body (in the binding's error
shape), extra headers."""


class BodyReader:
    """One binding's body reads: the size limit, the server-wide budget, and how the binding
    words a refused body.

    :param max_body_bytes: larger bodies are refused (413).
    :param bodies: the app's :class:`~.body.BodyBudget` (body deadline and memory bound), or
        None for no deadline and no bound.
    :param refuse: turns a refusal into the binding's answer (a JSON-RPC error frame, a
        ``google.rpc.Status`` body).
    """

    __slots__ = ("bodies", "max_body_bytes", "refuse")

    def __init__(self, max_body_bytes: int, bodies: BodyBudget | None,
                 refuse: Callable[[BodyRefused], Refusal]) -> None:
        self.max_body_bytes = max_body_bytes
        self.bodies = bodies
        self.refuse = refuse

    def refusal(self, request: RequestScope, refusal: Refusal | None) -> Refusal | None:
        """What to send once out of ``request``'s scope: ``refusal`` (returned by the work in
        the scope, or None when the request was answered or nobody is left to answer), unless
        the body's deadline cancelled the scope: then 408 (503 ``ServerClosing`` once shutdown
        closed the budget), whatever the work had got to.

        Cancellation: a body deadline cancels the scope and its exit swallows that
        cancellation (closing.RequestScope); any other (a hang-up, the server's own)
        propagates out of the ``with`` block before this is called.
        """
        if request.read_expired:  # the deadline cancelled (or ended) the first read
            assert self.bodies is not None  # only a budget arms it
            return self.refuse(ServerClosing() if self.bodies.closing
                               else BodyTooSlow(self.bodies.timeout))
        return refusal

    async def read(self, scope: Scope, receive: Receive,
                   request: RequestScope) -> bytes | Refusal | None:
        """The whole body (bytes), its refusal (a :data:`Refusal`, the rest of the body
        drained by :func:`~.body.read_body`), or None if the client went away first.

        Cancellation: the partial body is dropped and the cancellation propagates (the first
        read's deadline is ``request``'s, see :meth:`refusal`).
        """
        bodies = self.bodies
        try:
            return await read_body(
                scope, receive, self.max_body_bytes, budget=bodies,
                first=bodies.first_read(request) if bodies is not None else None)
        except BodyRefused as exc:
            return self.refuse(exc)  # (exc, and with it its traceback, ends with this block)
        except ClientGone:
            return None


__all__ = ["BodyReader", "Refusal"]
