"""The package's deadline: :func:`fail_after`, anyio's, without the reference cycle.

``anyio.fail_after`` (and ``trio.fail_after``) are ``@contextmanager`` generators. On Python
3.12+ the TimeoutError they raise out of the generator leaves the generator's frames
(``fail_after``, ``fail_at``, contextlib's ``__exit__``) in a reference cycle, and with them,
through ``f_back``, the frame of the code that timed out and everything it held (a request, a
body read so far): all of it waits for the cyclic collector (docs/design.md, "Facts about the
stack"; a bare timed-out sleep left 27 objects on asyncio and 50 on trio on 3.13, none on 3.11,
where a Redis command timing out on trio still left some).

:func:`fail_after` is a plain class around anyio's cancel scope, whose own exit makes no cycle:
the TimeoutError is raised from ``__exit__`` once the scope has swallowed its own cancellation.
It is used like anyio's (without ``as``), and raises what anyio's raises, so callers keep their
``except TimeoutError``. ``tests/test_timeouts.py`` checks that no module of ``src/`` calls the
generator versions.
"""

from __future__ import annotations

from types import TracebackType

import anyio


class fail_after:  # lower case: named, and used, as the anyio function it replaces
    """Bound the block by ``seconds`` (None: no bound); TimeoutError if the deadline ends it.

    On entry a cancel scope gets its deadline (``seconds`` from now; zero or less: already
    past). When it passes, the block is cancelled at its next checkpoint and, once the scope
    has caught its own cancellation, TimeoutError (message ``reason``, if given) is raised in
    its place, as anyio does. Cancellation from outside passes through unchanged, and so does
    any error the block raises (a TimeoutError of its own included). The scope is not handed
    out (``with ... as``): nothing but its deadline can cancel it, so whatever it swallows is a
    timeout, and the block never ends quietly.
    """

    __slots__ = ("_reason", "_scope")

    def __init__(self, seconds: float | None, *, reason: str | None = None) -> None:
        self._scope = anyio.move_on_after(seconds)
        self._reason = reason

    def __enter__(self) -> None:
        self._scope.__enter__()

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> None:
        scope = self._scope
        # trio's scope also answers True when nothing was raised: cancelled_caught tells.
        if scope.__exit__(exc_type, exc_val, exc_tb) and scope.cancelled_caught:
            # The scope swallowed its own cancellation: the deadline passed. ``from None``:
            # what the block was doing when cancelled is not the caller's business. Raised
            # with no local naming it: the traceback holds this frame, which would then hold
            # the error back (a cycle).
            raise (TimeoutError(self._reason) if self._reason else TimeoutError()) from None
