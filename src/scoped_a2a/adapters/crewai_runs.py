"""A CrewAI ``Agent`` as an a2a-sdk (0.3) executor whose model calls end with its run.

CrewAI ships no executor class, only the helpers its own A2A server calls
(``crewai.a2a.utils.task.execute`` / ``cancel``); :func:`crewai_executor` is an executor made
of that ``execute``'s body, with two things CrewAI's server lacks:

- **One copy of the agent per concurrent run** (``Agent.copy()``, as a CrewAI ``Crew`` copies
  its agents): one CrewAI agent holds one ``AgentExecutor`` that refuses a second concurrent
  run ("Executor is already running"), so with CrewAI's helpers a second caller fails while the
  first runs. The copy shares the LLM object (and its HTTP connection pool) and the tools. A
  copy whose run ended by itself is kept for a later run (at most ``MAX_IDLE_COPIES``), as
  CrewAI's helpers reuse their one agent: a fresh copy builds its CrewAI ``AgentExecutor`` (a
  ``Flow``, whose state model pydantic generates) on its first run, about 7 ms of CPU, where the
  copy itself is 0.5 ms. A copy whose run was cancelled or failed is dropped (its thread may
  still be running).
- **The model call stops with the run.** CrewAI runs its agent loop as a ``Flow`` whose sync
  steps run in worker threads (``asyncio.to_thread``): the LLM call is a blocking ``OpenAI``
  (or other Stainless-SDK) client call in a thread, which cancelling the run cannot reach, and
  CrewAI's ``cancellable`` wrapper runs ``execute`` as a task nobody owns. So ``execute`` here
  runs the undecorated body (``functools.wraps`` keeps it as ``__wrapped__``) in the run's own
  task, and the LLM's HTTP client gets a transport (:class:`StoppableTransport`, installed once
  per client) that records each response by the run that asked for it (a context variable,
  which ``to_thread`` carries into the thread). When the run ends for any reason, the run's
  responses still open have their sockets shut down (the model sees its connection closed at
  once; the thread reads end-of-stream and finishes, its result discarded) and any later
  request of that run raises :class:`RunStopped` (a BaseException, so no SDK retry or CrewAI
  error handler turns it into another model call). On a cancel this happens before ``execute``
  sees its cancellation (:meth:`.run_generators.RunGenerators.when_cancelled`): CrewAI's own
  cancellation handlers take milliseconds, during which the model would go on streaming.

Limits: a call still waiting for its response headers is closed when they arrive (its socket is
not known before); an LLM without a Stainless-SDK HTTP client (CrewAI's LiteLLM fallback) or
HTTP made by tools is not covered (logged once per agent at INFO): those calls finish in their
thread, their result discarded.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx

from . import run_generators

log = logging.getLogger("scoped_a2a.adapters")

MAX_IDLE_COPIES = 64
"""Copies of the agent kept for later runs (at most the peak of concurrent runs is made)."""

_current: contextvars.ContextVar[RunCalls | None] = contextvars.ContextVar(
    "scoped_a2a_crewai_run", default=None)


class RunStopped(BaseException):
    """A model request of a run that has ended (a BaseException: nothing retries it)."""


class RunCalls:
    """The open model responses of one run; thread-safe (CrewAI reads them in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[httpx.Response] = set()
        self.stopped = False

    def check(self) -> None:
        if self.stopped:
            raise RunStopped("the run this model call belongs to has ended")

    def opened(self, response: httpx.Response) -> bool:
        """Record an open response; False (record nothing) if the run has stopped."""
        with self._lock:
            if self.stopped:
                return False
            self._open.add(response)
            return True

    def closed(self, response: httpx.Response) -> None:
        # Before the response's connection goes back to the pool: once pooled, another run
        # may use it, and stop() must not shut it down.
        with self._lock:
            self._open.discard(response)

    def stop(self) -> None:
        """End the run's model calls: shut down the sockets of its open responses (the model
        sees the close at once, the reading thread gets end-of-stream) and refuse new ones."""
        with self._lock:
            self.stopped = True
            still_open, self._open = self._open, set()
        for response in still_open:
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is None:
                continue
            with contextlib.suppress(OSError):  # closed already
                sock.shutdown(socket.SHUT_RDWR)


class _TrackedStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, calls: RunCalls, response: httpx.Response) -> None:
        self._inner, self._calls, self._response = inner, calls, response

    def __iter__(self) -> Iterator[bytes]:
        yield from self._inner

    def close(self) -> None:
        self._calls.closed(self._response)
        self._inner.close()


class StoppableTransport(httpx.BaseTransport):
    """Wraps an HTTP client's transport: each response of a run (the context variable set by
    the executor) is recorded until closed, so the run's end can close it (module docstring).
    Requests made outside a run pass through untouched."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        calls = _current.get()
        if calls is None:
            return self.inner.handle_request(request)
        calls.check()
        response = self.inner.handle_request(request)
        response.stream = _TrackedStream(response.stream, calls, response)
        if not calls.opened(response):  # the run ended while the headers were awaited
            response.close()
            calls.check()
        return response

    def close(self) -> None:
        self.inner.close()


def _http_client(llm: Any) -> httpx.Client | None:
    """The httpx client of a CrewAI LLM's SDK client (OpenAI, Anthropic, ...: ``_client``)."""
    make = getattr(llm, "_get_sync_client", None)
    try:
        sdk = make() if callable(make) else getattr(llm, "_client", None)
    except Exception:  # no API key yet: CrewAI defers the client
        return None
    http = getattr(sdk, "_client", None)
    return http if isinstance(http, httpx.Client) else None


def make_stoppable(agent: Any) -> bool:
    """Install :class:`StoppableTransport` on the HTTP clients of ``agent``'s LLMs (once per
    client: idempotent); False, logged at INFO, when its LLM has no such client."""
    found = False
    for llm in (getattr(agent, "llm", None), getattr(agent, "function_calling_llm", None)):
        http = _http_client(llm) if llm is not None else None
        if http is None:
            continue
        found = True
        # Private httpx attributes: the client is CrewAI's, made inside the LLM; a proxy
        # from the environment is a mount, so mounts are wrapped too.
        if not isinstance(http._transport, StoppableTransport):
            http._transport = StoppableTransport(http._transport)
        http._mounts = {pattern: t if t is None or isinstance(t, StoppableTransport)
                        else StoppableTransport(t) for pattern, t in http._mounts.items()}
    if not found:
        log.info("CrewAI agent %r: its LLM (%s) has no HTTP client this adapter can close; a "
                 "cancelled run's model call finishes in CrewAI's thread (result discarded)",
                 getattr(agent, "role", ""), type(getattr(agent, "llm", None)).__name__)
    return found


@functools.cache
def _executor_type() -> type:
    """The executor class for CrewAI agents (made on first use: it imports CrewAI)."""
    from a2a.server.agent_execution import AgentExecutor

    task = importlib.import_module("crewai.a2a.utils.task")
    # The body of CrewAI's execute without its ``cancellable`` wrapper (module docstring).
    # Without it (another CrewAI), the decorated ``execute``, stopped by CrewAI's cancel flag.
    work = getattr(getattr(task, "_execute_impl", None), "__wrapped__", None)

    class CrewAIExecutor(AgentExecutor):
        """A CrewAI agent as an a2a-sdk executor: CrewAI's own task helpers, one copy of the
        agent per run, its model calls closed when the run ends (module docstring)."""

        def __init__(self, agent: Any) -> None:
            self.agent = agent
            self._idle: list[Any] = []  # copies whose last run ended by itself
            make_stoppable(agent)

        async def execute(self, context: Any, event_queue: Any) -> None:
            if work is None:
                await task.execute(self.agent, context, event_queue)
                return
            calls = RunCalls()
            token = _current.set(calls)
            if (run := run_generators.current()) is not None:
                # Closed the moment the run is cancelled, before CrewAI's own cancellation
                # handlers (its events, its console) run: no token more reaches the caller's
                # bill than the one already on the wire.
                run.when_cancelled(calls.stop)
            agent = self._idle.pop() if self._idle else self.agent.copy()
            try:
                await work(agent, context, event_queue, None, None)
            finally:
                # However execute ends (cancelled, most often: a hang-up, CancelTask, a
                # deadline), nothing it opened stays open in CrewAI's threads.
                calls.stop()
                _current.reset(token)
            # Only a copy whose run ended by itself is reused: a cancelled or failed run's
            # executor may still be running in CrewAI's thread.
            if len(self._idle) < MAX_IDLE_COPIES:
                self._idle.append(agent)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            if work is None:  # the decorated execute stops on CrewAI's flag only
                await task.cancel(context, event_queue)
            # Otherwise execute was cancelled and its model calls closed already; CrewAI's
            # cancel would only set a flag nobody reads (kept an hour in its cache) and enqueue
            # a canceled the runtime records itself.

    return CrewAIExecutor


def crewai_executor(agent: Any) -> Any:
    """An a2a-sdk (0.3) ``AgentExecutor`` running the CrewAI ``agent`` with CrewAI's helpers,
    so ``serve --agent`` takes the bare agent (see the module docstring)."""
    return _executor_type()(agent)
