"""Close the async generators a cancelled run left suspended (a model stream among them).

Why. A framework that consumes a model stream through nested async generators (BeeAI: its
``_create_stream`` over LiteLLM's stream over the OpenAI SDK's over the HTTP response) closes the
stream only if the cancellation reaches it *inside* the innermost generator, while it awaits the
socket: the ``CancelledError`` then passes through every generator and their ``finally`` blocks
close the response. When the cancellation lands anywhere else (BeeAI emitting its
``new_token`` event between two chunks: most of the time on a loaded machine, where chunks wait
in the socket buffer), every generator is left suspended at a ``yield``, nobody closes it, and
the chain stays alive in a reference cycle until the cyclic garbage collector happens to run:
the model's connection stays open and the model goes on generating.

What. :func:`tracked` runs a coroutine (an executor's ``execute``) with a :class:`RunGenerators`
in a context variable; a first-iteration hook (``sys.set_asyncgen_hooks``, wrapping the event
loop's own, asyncio's or trio's, which still runs) records every async generator first iterated
by that coroutine or by the tasks it starts (they inherit the variable). Once the run is
cancelled, :meth:`RunGenerators.close_suspended` closes those still suspended at a ``yield``,
newest first (the innermost: the HTTP stream's, whose ``finally`` closes the connection), as the
event loop would close them at its own shutdown. Only a cancelled run's are closed: a run that
ends by itself leaves its generators to their owners, as before.

Code of the run can also register what must stop the moment the run is cancelled, before its
own cancellation handlers run (:meth:`RunGenerators.when_cancelled`: CrewAI's model calls, in
:mod:`.crewai_runs`); the adapter calls those first (``run_abandonable``'s ``on_cancel``).

Limits. A generator created by the run but handed to something that outlives it (a shared,
lazily started stream) would be closed too: a cancelled run's work is meant to end. A generator
running at that moment (awaiting inside ``__anext__``) belongs to a task still running, and is
left to that task's cancellation. Each ``aclose`` runs the generator's own cleanup, bounded by
the caller's deadline; an exception it raises is logged at DEBUG and the next one is closed.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger("scoped_a2a.adapters")

T = TypeVar("T")

_current: contextvars.ContextVar[RunGenerators | None] = contextvars.ContextVar(
    "scoped_a2a_run_generators", default=None)


class RunGenerators:
    """The async generators one run first iterated, in that order (weakly held: the run keeps
    none alive; the dead are pruned as the list grows)."""

    def __init__(self) -> None:
        self._gens: list[weakref.ref[AsyncGenerator[Any, Any]]] = []
        self._prune_at = 64
        self._on_cancel: list[Callable[[], object]] = []

    def when_cancelled(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (synchronous) when the run is cancelled, before the executor sees
        its cancellation (:meth:`cancelled`)."""
        self._on_cancel.append(callback)

    def cancelled(self) -> None:
        """The run is being cancelled: call the callbacks registered by its code, once each
        (an exception from one is logged; the others are called)."""
        callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a cancelled run's %r raised", callback)

    def add(self, agen: AsyncGenerator[Any, Any]) -> None:
        self._gens.append(weakref.ref(agen))
        if len(self._gens) >= self._prune_at:  # amortised: a run may iterate thousands
            self._gens = [ref for ref in self._gens if ref() is not None]
            self._prune_at = max(64, 2 * len(self._gens))

    def __len__(self) -> int:
        return sum(ref() is not None for ref in self._gens)

    async def close_suspended(self) -> int:
        """``aclose()`` every recorded generator still suspended at a ``yield`` (not running,
        not finished), newest first; how many were closed. Call it shielded and bounded."""
        gens, self._gens = self._gens, []
        closed = 0
        for ref in reversed(gens):
            agen = ref()
            if agen is None or agen.ag_frame is None or agen.ag_running:
                continue
            try:
                await agen.aclose()
            except Exception:
                log.debug("closing %s of a cancelled run raised", agen, exc_info=True)
            closed += 1
        return closed


def _record(original: Callable[[AsyncGenerator[Any, Any]], object] | None
            ) -> Callable[[AsyncGenerator[Any, Any]], None]:
    def firstiter(agen: AsyncGenerator[Any, Any]) -> None:
        run = _current.get()
        if run is not None:
            run.add(agen)
        if original is not None:
            original(agen)  # the event loop's own bookkeeping (closed at its shutdown)

    firstiter.scoped_a2a_records = True  # type: ignore[attr-defined]
    return firstiter


def _install() -> None:
    """Wrap this thread's first-iteration hook, once per hook: the event loop installs its own
    when it starts (and restores the previous one when it stops), so this is checked per run."""
    firstiter, finalizer = sys.get_asyncgen_hooks()
    if not getattr(firstiter, "scoped_a2a_records", False):
        sys.set_asyncgen_hooks(firstiter=_record(firstiter), finalizer=finalizer)


def current() -> RunGenerators | None:
    """The :class:`RunGenerators` of the executor run this code belongs to, if any (a
    framework wrapper registers what to stop at once with :meth:`~RunGenerators.when_cancelled`)."""
    return _current.get()


async def tracked(generators: RunGenerators, fn: Callable[[], Awaitable[T]]) -> T:
    """Await ``fn()`` recording the async generators it (and the tasks it starts) iterates."""
    _install()
    token = _current.set(generators)
    try:
        return await fn()
    finally:
        _current.reset(token)
