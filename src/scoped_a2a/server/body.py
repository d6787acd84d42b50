"""Reading a request body within bounds: its size, its pieces, its time, and the server-wide
memory of bodies still arriving (:class:`BodyBudget`); and dropping one that will not be used.

Every binding reads bodies here (JSON-RPC, HTTP+JSON, gRPC, the console's login), so one set of
bounds holds for all. Each refusal is a :class:`BodyRefused` that carries what the caller is
told: an HTTP status, the A2A error, headers, and a text saying what to fix.
"""

from __future__ import annotations

from contextlib import nullcontext

import anyio

from ..protocol.errors import A2AError, InvalidRequest, ServerUnavailable
from .asgi import Receive, Scope, header
from .closing import ClosingDeadlines, ClosingScope, Phase, RequestScope
from .eager import bounded


class BodyRefused(Exception):
    """A request body this server will not read (to the end); the request gets an error.

    ``more_body`` tells whether the client is still sending (so the rest may be discarded);
    ``http_status`` is the status the HTTP bindings answer with; ``str(exc)`` tells the caller
    what to fix.
    """

    http_status = 400

    def __init__(self, text: str, more_body: bool = True) -> None:
        super().__init__(text)
        self.more_body = more_body

    def a2a_error(self) -> A2AError:
        """The A2A error an HTTP binding answers with (its text is this refusal's)."""
        return InvalidRequest(str(self))

    def http_headers(self) -> list[tuple[bytes, bytes]]:
        """Headers for the refusal: the connection is closed (its body may be unread)."""
        return [(b"connection", b"close")]


class BodyTooLarge(BodyRefused):
    """The request body is over the configured limit (answered 413)."""

    http_status = 413

    def __init__(self, more_body: bool = True, limit: int | None = None) -> None:
        super().__init__("the request body is over the limit" if limit is None else
                         f"the request body exceeds {limit} bytes", more_body)
        self.limit = limit
        """The limit passed (the body limit, or what the server-wide budget can hold)."""


class BodyInTooManyPieces(BodyTooLarge):
    """The request body came in more than ``MAX_BODY_MESSAGES`` pieces (answered 413).

    Each piece (an ASGI message: one chunk of a chunked body, or one read of a plain one) costs
    the server a fixed amount of work whatever its size, so a body sent one byte at a time
    would make us spend seconds of CPU on a few hundred KiB. Capping the pieces bounds that.
    """

    def __init__(self, more_body: bool = True, pieces: int = 0) -> None:
        super().__init__(more_body)
        self.args = (f"the request body came in more than {pieces} pieces",)


class BodyTooSlow(BodyRefused):
    """The request body did not arrive whole within the body deadline (answered 408)."""

    http_status = 408

    def __init__(self, seconds: float) -> None:
        # more_body False: the rest is not discarded, since a client this slow would hold the
        # discard for its whole time too; it may see a reset instead of the answer.
        super().__init__(f"the request body did not arrive within {seconds:g} s; send the "
                         "whole body within that time", more_body=False)


class BodiesOverBudget(BodyRefused):
    """Taking this body would hold more unfinished request bodies than the server allows
    (answered 503 with ``Retry-After``: it is the server's state, not this request's fault)."""

    http_status = 503

    def __init__(self, text: str = "the server is receiving as many large request bodies as "
                 "it holds at once; retry shortly", more_body: bool = True) -> None:
        super().__init__(text, more_body)

    def a2a_error(self) -> A2AError:
        return ServerUnavailable(str(self))

    def http_headers(self) -> list[tuple[bytes, bytes]]:
        return [*super().http_headers(), (b"retry-after", b"1")]


class ServerClosing(BodiesOverBudget):
    """The server began shutting down while this body was still arriving (answered 503 with
    ``Retry-After``): a body unfinished :data:`BodyBudget.CLOSING_SECONDS` after that point is
    refused rather than left for the shutdown to cut off with no answer."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down and the request body had not arrived "
                         "whole; send the request again", more_body=False)


MAX_BODY_MESSAGES = 4096
"""A request body in more pieces than this is refused (413), whatever its size. Ordinary clients
send a body in a few pieces (hypercorn hands on up to 64 KiB per read; chunked uploads use
chunks of KiBs): an 8 MiB body in 4 KiB chunks is 2,048 pieces."""


class BodyBudget:
    """The server-wide bounds on request bodies still arriving: bytes held, and time.

    Without them, a client that sends most of a large body and never the end holds that memory
    for as long as its connection lives: 50 HTTP/2 streams of 4 MB each took a server from
    47 to 254 MB, with nothing to release it. Here every body must arrive whole within
    ``timeout`` seconds (:class:`BodyTooSlow`), and the bytes of unfinished bodies are counted
    over all requests (:class:`BodiesOverBudget` once a body would pass a bound): those beyond
    each body's first :data:`FREE_BYTES` against ``max_bytes``, and those within them on their
    own against ``max_bytes`` again, so at most twice ``max_bytes`` in all. Apart, because every
    A2A call but a file upload fits in the first 64 KiB: a flood of large bodies cannot lock
    ordinary calls out. Counted all the same, because nothing bounds the connections a client
    may open: uncounted, 2,000 HTTP/2 streams that each sent 63.5 KiB and never the end grew a
    server with a 1 MiB bound by 91 MB.

    Bodies read before their caller is authenticated (a console login) may hold only an eighth
    of the bound between them (:attr:`unauthenticated_max`): counted like the others, they could
    otherwise fill it and lock every authenticated caller out.

    At shutdown (:meth:`close`), a body still arriving gets :data:`CLOSING_SECONDS` more, then
    :class:`ServerClosing`. One budget is shared by every binding of an app; it lives in one
    event loop, so it needs no lock.
    """

    FREE_BYTES = 64 << 10
    CLOSING_SECONDS = 1.0

    def __init__(self, max_bytes: int = 128 << 20, timeout: float = 60.0) -> None:
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.held = 0
        """Bytes of unfinished bodies counted now beyond each body's first ``FREE_BYTES``."""
        self.held_first = 0
        """Bytes of unfinished bodies counted now within each body's first ``FREE_BYTES``."""
        self.held_unauthenticated = 0
        """Bytes of those (in either count) of bodies read before authentication."""
        self._reading = ClosingDeadlines(self.CLOSING_SECONDS)
        """The deadlines of the bodies being read, cut short by :meth:`close`."""

    def take(self, nbytes: int, first: int = 0, *, unauthenticated: bool = False) -> bool:
        """Count ``nbytes`` more held bytes beyond bodies' first ``FREE_BYTES`` and ``first``
        within them; False (nothing counted) if either passes the bound, or, for a body read
        before its caller is authenticated, if such bodies would hold more than
        :attr:`unauthenticated_max` in all."""
        if self.held + nbytes > self.max_bytes or self.held_first + first > self.max_bytes:
            return False
        if unauthenticated:
            if self.held_unauthenticated + nbytes + first > self.unauthenticated_max:
                return False
            self.held_unauthenticated += nbytes + first
        self.held += nbytes
        self.held_first += first
        return True

    @property
    def unauthenticated_max(self) -> int:
        """Bytes that bodies read before authentication (a console login) may hold in all: an
        eighth of the bound, so that callers nobody knows cannot lock known ones out."""
        return self.max_bytes // 8

    @property
    def largest_body(self) -> int:
        """The largest body this budget can hold unfinished even when nothing else is held
        (smaller than the body limit only when ``max_bytes`` was set below it)."""
        return min(self.FREE_BYTES, self.max_bytes) + self.max_bytes

    def never_fits(self, nbytes: int, first: int) -> bool:
        """Whether one body holding this much could not be taken even with nothing else
        held: it is then too large for this server (413), not early (503, retry)."""
        return nbytes > self.max_bytes or first > self.max_bytes

    def give_back(self, nbytes: int, first: int = 0, *, unauthenticated: bool = False) -> None:
        """Uncount what :meth:`take` counted (the body ended, was refused, or its reader was
        cancelled)."""
        if unauthenticated:
            self.held_unauthenticated -= nbytes + first
        self.held -= nbytes
        self.held_first -= first

    @property
    def closing(self) -> bool:
        """:meth:`close` was called: bodies get at most ``CLOSING_SECONDS`` more."""
        return self._reading.closing

    def close(self) -> None:
        """The server is shutting down: every body still arriving, and every one that starts
        from now on, must end within ``CLOSING_SECONDS`` (or its own deadline, if sooner), so
        that it is answered (:class:`ServerClosing`) before the server stops serving. Calling
        it again changes nothing."""
        self._reading.close()

    async def wait_closed(self) -> None:
        """After :meth:`close`: return once no body is being read (each has ended or been
        refused), at most ``CLOSING_SECONDS`` and a little later, and a moment for the refusals
        to be sent. Cancellation just stops the waiting."""
        if self._reading.open:
            with anyio.move_on_after(self.CLOSING_SECONDS + 0.5):
                await self._reading.wait_none_open()
                await anyio.sleep(0.05)  # the refusals' answers are sent in the readers' tasks

    def first_read(self, request: RequestScope) -> Phase:
        """The part of ``request``'s scope that reads a body's first piece (``timeout``,
        shortened at :meth:`close`; armed only if the read waits)."""
        return request.reading(self._reading, self.timeout)

    def deadline(self, *, lazy: bool = False) -> ClosingScope:
        """The cancel scope a body is read in: ``timeout``, shortened at :meth:`close`
        (``lazy``: from when it is armed; see :meth:`.ClosingDeadlines.scope`)."""
        return self._reading.scope(self.timeout, lazy=lazy)


class ClientGone(Exception):
    """The client disconnected before its body was read (nobody to answer)."""


async def read_body(
    scope: Scope, receive: Receive, limit: int, max_messages: int | None = None, *,
    budget: BodyBudget | None = None, unauthenticated: bool = False,
    first: Phase | None = None,
) -> bytes:
    """Read the whole request body, refusing more than ``limit`` bytes.

    A declared Content-Length over the limit is refused before reading anything; so is a body
    in more than ``max_messages`` pieces, once the piece after the last allowed one arrives. The
    pieces go into one growing buffer, so the work is linear in the body's size and pieces.
    With a ``budget``, the body must arrive within its deadline and its held bytes are counted
    against the server-wide bound while it is unfinished (:class:`BodyBudget`); they are
    uncounted however reading ends; ``unauthenticated``: the caller is not known yet (its
    body may hold only a share of the bound). On cancellation the partial body is dropped. Raises
    BodyTooLarge (BodyInTooManyPieces), BodyTooSlow, BodiesOverBudget (ServerClosing once the
    budget is closed) or ClientGone. Before a refusal is raised, the rest of a body still
    arriving is discarded within bounds (:func:`discard_body`), so the caller can answer.
    ``first`` (with a ``budget``): the first piece is read in this part of the request's own
    scope (closing.RequestScope) rather than a scope of its own; its deadline passing then
    cancels that scope (the caller answers once it has left it), or, if the piece came just as
    it passed, raises as a scope of its own would.
    """
    try:
        return await _read(scope, receive, limit, max_messages, budget, unauthenticated, first)
    except BodyRefused as exc:
        if exc.more_body:
            await discard_body(scope, receive)
        raise


async def _read(scope: Scope, receive: Receive, limit: int, max_messages: int | None,
                budget: BodyBudget | None, unauthenticated: bool,
                first_read: Phase | None = None) -> bytes:
    max_messages = MAX_BODY_MESSAGES if max_messages is None else max_messages
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit=limit)
    if budget is not None:
        # Most bodies are queued whole before the app runs: the first piece is taken with no
        # deadline scope if it is there at once (eager.py); if it has to be waited for, the
        # deadline is in place before the wait.
        head = await bounded(receive(), budget.deadline(lazy=True) if first_read is None
                             else first_read)
        if head is None or (first_read is not None and first_read.expired):  # deadline passed
            raise ServerClosing if budget.closing else BodyTooSlow(budget.timeout)
        if head["type"] == "http.request" and not head.get("more_body", False):
            chunk = head.get("body", b"")
            if len(chunk) > limit:
                raise BodyTooLarge(more_body=False, limit=limit)
            return bytes(chunk)
    else:
        head = None
    body = bytearray()
    pieces = counted = counted_first = 0
    try:
        with budget.deadline() if budget is not None else nullcontext():
            while True:
                if head is not None:
                    message, head = head, None
                else:
                    message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                more = bool(message.get("more_body", False))
                chunk = message.get("body", b"")
                pieces += 1
                if len(body) + len(chunk) > limit:
                    raise BodyTooLarge(more_body=more, limit=limit)
                if pieces > max_messages:
                    raise BodyInTooManyPieces(more_body=more, pieces=max_messages)
                body += chunk
                if not more:
                    return bytes(body)
                if budget is not None:  # held across the next await: count it
                    first = min(len(body), BodyBudget.FREE_BYTES) - counted_first
                    owed = max(0, len(body) - BodyBudget.FREE_BYTES) - counted
                    if (owed or first) and not budget.take(owed, first,
                                                           unauthenticated=unauthenticated):
                        if budget.never_fits(counted + owed, counted_first + first):
                            raise BodyTooLarge(more_body=more, limit=budget.largest_body)
                        raise BodiesOverBudget
                    counted += owed
                    counted_first += first
        assert budget is not None  # only its deadline can end the loop
        raise ServerClosing if budget.closing else BodyTooSlow(budget.timeout)
    finally:
        if counted or counted_first:
            assert budget is not None
            budget.give_back(counted, counted_first, unauthenticated=unauthenticated)


DISCARD_BYTES = 1 << 20
"""At most this many bytes of a refused body are read and dropped before answering."""
DISCARD_SECONDS = 2.0
"""...and for at most this long."""


async def discard_body(scope: Scope, receive: Receive) -> None:
    """Read and drop the rest of a request body that will not be used, within bounds.

    Call it before answering a request refused without reading (all) its body, unless the body
    was read to its end. Why: hypercorn closes the connection as soon as such a response ends,
    and closing a socket with unread request data makes the kernel reset the connection, so the
    client can lose the answer (seen with chunked bodies on the asyncio worker). Draining lets the
    client finish sending and read our answer. Beyond ``DISCARD_BYTES``, ``MAX_BODY_MESSAGES``
    pieces or ``DISCARD_SECONDS`` (or a declared length larger than that) it gives up at once:
    the client may then see a reset instead of the answer, which is the price of not reading
    unbounded input. On HTTP/2 it returns at once: an answer there ends its stream and leaves
    the connection open. Returns at a disconnect; cancellation just stops the reading.
    """
    if scope.get("http_version") == "2":
        return  # an HTTP/2 answer ends the stream, not the connection: nothing to protect
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > DISCARD_BYTES:
        return
    size = pieces = 0
    with anyio.move_on_after(DISCARD_SECONDS):
        while size <= DISCARD_BYTES and pieces <= MAX_BODY_MESSAGES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            size += len(message.get("body", b""))
            pieces += 1
