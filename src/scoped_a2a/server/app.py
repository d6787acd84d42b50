"""``A2AApp``: the ASGI application: what it is made of, its lifespan and shutdown; which
handler answers a request is :mod:`.http_routes`.

The ownership tree (see docs/design.md)::

    server (lifespan, or app.running())
    ├── server nursery: every run; passed in as ``detached=`` or opened here
    └── request: one task group per HTTP request
        ├── the method (holds the runs it waits on; writes the answer or the SSE stream)
        └── disconnect watcher: the only reader of receive() after the body; cancels the group

On a hang-up the watcher cancels the request's group: the method's holds are released, which
cancels interactive runs no one else holds; detached runs carry on in the server nursery.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    asynccontextmanager,
    nullcontext,
)
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from ..observe.base import Observer, observer_of
from ..push import PushService, PushSettings
from ..runtime.context import Agent
from ..runtime.handover import Handovers
from ..runtime.limits import CallerLimits
from ..runtime.policy import RunPolicy
from ..runtime.runner import Runner
from ..store.base import TaskStore
from ..store.memory import MemoryTaskStore
from .asgi import Receive, Scope, Send
from .auth import (
    Authenticate,
)
from .body import BodyBudget
from .card import build_card
from .card_signing import CardSigner
from .cards import CardPublisher
from .closing import ClosingDeadlines
from .dispatch import FINAL_WRITE_CLOSING
from .grpc import DEFAULT_MAX_FIELDS as DEFAULT_GRPC_MAX_FIELDS
from .http_routes import route
from .input_modes import InputModes
from .jsonrpc_binding import JsonRpcBinding
from .methods import Methods
from .rest import RestBinding

if TYPE_CHECKING:
    from .console import Console, ConsoleSettings

log = logging.getLogger("scoped_a2a.server")



class A2AApp:
    """An ASGI app serving one agent over A2A 1.0 and 0.3 JSON-RPC at ``/``.

    :param agent: an async callable taking a :class:`~scoped_a2a.RunContext`.
    :param card: fields that override the generated agent card (name, description, skills...).
    :param policy: which runs are detached (:class:`~scoped_a2a.RunPolicy`).
    :param detached: the server nursery (an AnyIO task group) runs belong to. When absent, the
        app's lifespan (or :meth:`running`) opens one and drains it on shutdown.
    :param store: where tasks live (default: a bounded in-memory store).
    :param grace: seconds runs get on shutdown before they are cancelled and recorded.
    :param public_url: the URL the card advertises (default: taken from the request).
    :param max_body_bytes: larger request bodies are refused with 413.
    :param body_timeout: seconds a request body may take to arrive whole (then 408).
    :param max_body_memory: bytes of unfinished request bodies held at once, over all requests
        (:class:`~.body.BodyBudget`; a body that would pass it gets 503).
    :param keepalive: seconds between keep-alive comments on an idle stream.
    :param stream_write_timeout: a stream whose client takes no event for this long is closed.
    :param extended_card: card fields for ``GetExtendedAgentCard`` (absent: -32007).
    :param push: push-notification settings (:class:`~scoped_a2a.push.PushSettings`); push is
        on by default, refusing webhooks on non-public addresses unless allowed.
    :param expose_errors: send the full text of an agent's (or a method's) exception to the
        caller; for development. By default the caller sees the exception's type and an error
        id that is also in the log line with the traceback; an agent's
        :class:`~scoped_a2a.AgentError` is always sent as is.
    :param authenticate: who is calling: ``async (scope) -> Principal``, raising
        ``Unauthenticated`` (HTTP 401) or ``PermissionDenied`` (403); e.g. an
        :class:`~scoped_a2a.server.auth.Authenticator` of API keys and JWTs, whose schemes the
        card then declares. Resolved once per request before routing; the public card stays
        readable without credentials. Absent: every caller is anonymous and sees every task.
        With it, each task belongs to the principal that created it: other callers get
        "task not found" for it.
    :param caller_limits: at most this many runs working / parked in ``ctx.ask`` per
        principal (:class:`~scoped_a2a.runtime.limits.CallerLimits`); a new task beyond a limit
        is refused with -32029 naming it.
    :param card_signer: sign the card (and the extended card) with this key
        (:class:`~scoped_a2a.server.card_signing.CardSigner`); its public JWKS is served,
        without credentials, at ``/.well-known/agent-card-jwks.json``.
    :param observe: an observer (or several): ``scoped_a2a.observe.tracing.Tracing()`` for
        OpenTelemetry spans, ``scoped_a2a.observe.metrics.Metrics()`` for Prometheus metrics on
        ``GET /metrics``. Default: none, and nothing is imported (docs/observability.md).

    Mounted in a host app (Starlette ``Mount("/a2a", app=...)``), it serves under the mount's
    ASGI ``root_path`` and its card advertises that prefix; the host's lifespan must enter
    :meth:`running`, since a host does not run a mounted app's lifespan.
    :param preferred_binding: ``"JSONRPC"`` (default) or ``"HTTP+JSON"``: the 1.0 interface the
        card lists first. Both are always served (HTTP+JSON routes: docs/rest.md).
    :param card_1_0_only: serve a card without the 0.3 fields (``url``, ``preferredTransport``,
        ``protocolVersion``, ``supportsAuthenticatedExtendedCard``), which the 1.0 card schema
        refuses; 0.3 clients then cannot find the endpoint from the card (they read ``url``).
        Default False: one card for both generations. The 0.3 dialect is still served.
    :param console: serve the live console at ``/console`` with these settings
        (:class:`~scoped_a2a.server.console.ConsoleSettings`; docs/console.md). Absent: no
        console, and nothing of it is imported.
    :param grpc: also serve A2A 1.0's gRPC binding (``lf.a2a.v1.A2AService``, docs/grpc.md)
        on the same port: HTTP/2 calls with ``content-type: application/grpc`` go to it, and
        the card lists a ``GRPC`` interface. Needs the ``[grpc]`` extra (protobuf) and HTTP/2
        (``serve`` switches it on for such an app).
    :param grpc_max_fields: a gRPC request message holding more protobuf fields than this
        (nested ones, each repeated element and map entry: a ``Struct`` entry is 4) is refused
        with RESOURCE_EXHAUSTED before it is decoded, since decoding costs the event loop time
        in proportion to fields (docs/grpc.md).
    """

    def __init__(
        self,
        agent: Agent,
        *,
        card: Mapping[str, Any] | None = None,
        policy: RunPolicy | None = None,
        detached: TaskGroup | None = None,
        store: TaskStore | None = None,
        grace: float = 10.0,
        public_url: str | None = None,
        max_body_bytes: int = 8 << 20,
        body_timeout: float = 60.0,
        max_body_memory: int = 128 << 20,
        keepalive: float = 15.0,
        stream_write_timeout: float = 30.0,
        extended_card: Mapping[str, Any] | None = None,
        push: PushSettings | None = None,
        expose_errors: bool = False,
        preferred_binding: str = "JSONRPC",
        authenticate: Authenticate | None = None,
        caller_limits: CallerLimits | None = None,
        card_signer: CardSigner | None = None,
        observe: Observer | Sequence[Observer] | None = None,
        card_1_0_only: bool = False,
        console: ConsoleSettings | None = None,
        grpc: bool = False,
        grpc_max_fields: int = DEFAULT_GRPC_MAX_FIELDS,
    ) -> None:
        if preferred_binding not in ("JSONRPC", "HTTP+JSON"):
            raise ValueError("preferred_binding must be 'JSONRPC' or 'HTTP+JSON'")
        self.preferred_binding = preferred_binding
        self.card_1_0_only = card_1_0_only
        self.agent = agent
        self.authenticate = authenticate
        self.card_signer = card_signer
        self.auth_failures = 0
        """Requests refused for no or bad credentials (401) or not allowed (403)."""
        self.observe = observer_of(observe)
        self.expose_errors = expose_errors
        self.policy = policy if policy is not None else RunPolicy()
        # Not ``store or ...``: an empty MemoryTaskStore has len() 0, so it is falsy.
        self.store: TaskStore = store if store is not None else MemoryTaskStore()
        # A shared store (Redis) may queue detached runs durably instead of running them here.
        self.runner = Runner(agent, self.store, self.policy, launcher=self.store.run_launcher(),
                             expose_errors=expose_errors, caller_limits=caller_limits)
        self.runner.observe = self.observe
        self.grace = grace
        self.max_body_bytes = max_body_bytes
        self.bodies = BodyBudget(max_body_memory, body_timeout)
        self.final_writes = ClosingDeadlines(FINAL_WRITE_CLOSING)
        """The final answers being written, over every binding: cut short at shutdown."""
        """Request bodies still arriving, over every binding: their deadline and memory bound."""
        self.stream_write_timeout = stream_write_timeout
        self._detached = detached
        self.push = PushService(self.store, push or PushSettings())
        # What an adapted agent's framework knows (name, description, skills) first, then
        # the fields given here: code (or ``serve --card``) wins.
        agent_card = getattr(agent, "card_fields", None)
        fields = {**(agent_card() if callable(agent_card) else {}), **(card or {})}
        self.cards = CardPublisher(
            fields, name=str(getattr(agent, "__name__", None) or "scoped-a2a agent"),
            extended=extended_card, authenticate=authenticate, signer=card_signer,
            public_url=public_url,
            features=dict(push_notifications=self.push.enabled,
                          cancel_on_disconnect=self.policy.cancel_on_disconnect,
                          preferred_binding=preferred_binding,
                          idempotent_send=self.store.dedupes_sends,
                          v03_fields=not card_1_0_only, grpc=grpc))
        """The public and extended cards (:mod:`.cards`)."""
        self.methods = Methods(
            self.runner,
            self.store,
            keepalive_every=keepalive,
            extended_card=self.cards.extended if extended_card is not None else None,
            push=self.push,
            input_modes=InputModes.from_card(build_card("", fields)),
        )
        transport = self.store.handover_transport()
        self.handovers = (Handovers(self.runner, self.store, transport)
                          if transport is not None else None)
        """Follow-ups handed to (and from) the process holding their run, on a shared store
        (:mod:`..runtime.handover`); None when every run executes here."""
        self.methods.sends.handovers = self.methods.sends.resends.handovers = self.handovers
        self.rest = RestBinding(self.methods, max_body_bytes=max_body_bytes,
                                write_timeout=stream_write_timeout, expose_errors=expose_errors,
                                observe=self.observe, bodies=self.bodies,
                                final_writes=self.final_writes)
        """The HTTP+JSON binding (:mod:`.rest`) over the same method table."""
        self.jsonrpc = JsonRpcBinding(self.methods, max_body_bytes=max_body_bytes,
                                      write_timeout=stream_write_timeout,
                                      expose_errors=expose_errors, observe=self.observe,
                                      bodies=self.bodies, final_writes=self.final_writes)
        """The JSON-RPC binding (:mod:`.jsonrpc_binding`), 1.0 and 0.3, at the root."""
        self.grpc = self._grpc_binding(grpc_max_fields) if grpc else None
        """The gRPC binding (:mod:`.grpc`) over the same method table, or None."""
        self.ready = anyio.Event()
        """Set once the server side runs (lifespan started): ``serve`` waits for it."""
        self.lifespan_ending = anyio.Event()
        """Set when the server has stopped serving connections and sent ``lifespan.shutdown``
        (``serve`` watches for it: hypercorn's asyncio worker can hang before it)."""
        self.open_requests = 0
        """Requests in flight now (tests count them to prove nothing is left behind)."""
        if detached is not None:
            self.runner.attach(detached)
            self.push.attach(detached)
        self.console: Console | None = None
        """The live console (``console=``), or None."""
        if console is not None:
            from .console import Console

            self.console = Console(console, runner=self.runner, store=self.store,
                                   authenticate=authenticate, public_url=public_url,
                                   write_timeout=stream_write_timeout, bodies=self.bodies)

    def _grpc_binding(self, max_fields: int) -> Any:
        try:
            from .grpc.binding import GrpcBinding
        except ImportError as exc:  # protobuf is the [grpc] extra
            raise RuntimeError("gRPC needs protobuf: pip install 'scoped-a2a[grpc]'") from exc

        def refused() -> None:
            self.auth_failures += 1

        return GrpcBinding(self.methods, authenticate=self.authenticate,
                           max_body_bytes=self.max_body_bytes, max_fields=max_fields,
                           write_timeout=self.stream_write_timeout,
                           expose_errors=self.expose_errors, observe=self.observe,
                           refused=refused, bodies=self.bodies,
                           final_writes=self.final_writes)

    # --- lifetime -------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[A2AApp]:
        """Run the app's server side for the ``async with`` body (lifespan does this for you).

        Opens the server nursery unless one was passed in. On exit: :meth:`drain` (new sends are
        refused, runs get ``grace`` seconds, the rest are cancelled, and every one records how
        it ended; nothing left to do if it already ran), then pending push deliveries get
        ``push_grace`` seconds. If the exit is itself a cancellation, the grace periods are
        skipped and the runs are recorded as ended by shutdown.
        """
        if self._detached is not None:
            # Push deliveries drain after the runs (their last states are deliveries too).
            async with (
                self.push.serving(self._detached, grace=self.push_grace),
                self._handing_over(self._detached),
            ):
                self.runner.attach(self._detached)
                self.ready.set()
                try:
                    yield self
                finally:
                    await self.drain()
            return
        async with (
            anyio.create_task_group() as nursery,
            self.push.serving(nursery, grace=self.push_grace),
            self._handing_over(nursery),
        ):
            self.runner.attach(nursery)
            self.ready.set()
            try:
                yield self
            finally:
                await self.drain()

    def _handing_over(self, nursery: TaskGroup) -> AbstractAsyncContextManager[None]:
        """Hand-overs served in ``nursery`` (until after the drain), when the store has them."""
        if self.handovers is None:
            return nullcontext()
        return self.handovers.serving(nursery)

    @property
    def push_grace(self) -> float:
        """Seconds pending push deliveries get on shutdown, after the runs have ended."""
        configured = self.push.settings.shutdown_grace
        return self.grace if configured is None else configured

    @property
    def drain_seconds(self) -> float:
        """How long the app's shutdown may take: runs (:meth:`drain`), then push deliveries."""
        return self.grace + self.push_grace

    async def drain(self, grace: float | None = None) -> None:
        """End every run for shutdown; return once each has recorded how it ended.

        New sends (and follow-ups) are refused from the first moment with -32000. Runs parked
        in ``ctx.ask`` are cancelled at once (they wait for a person, whose answer would be
        refused); the others get ``grace`` seconds (default: the app's ``grace``), then are
        cancelled with reason ``shutdown``. Every caller still waiting on a run (blocking send,
        stream, subscription) is answered with the final task as soon as its run records its
        end, so call this *before* your server stops serving connections: ``serve`` calls it
        from its shutdown trigger. Calling it again (the lifespan shutdown does) returns at once.

        Final answers still being written get :data:`~.dispatch.FINAL_WRITE_CLOSING` (5 s) at
        most from now on. Request bodies still arriving get a moment to end, then are refused
        with 503 (:meth:`.body.BodyBudget.close`); this returns only once they are answered, so
        that they are answered while the server still serves (at most about 1.5 s past the
        runs).

        On cancellation the grace period is cut short: the runs left are cancelled at once
        (reason ``shutdown``) and the cancellation propagates.
        """
        self.bodies.close()
        self.final_writes.close()
        try:
            await self.runner.shutdown(self.grace if grace is None else grace)
            await self.bodies.wait_closed()
        finally:
            # Interrupted by cancellation: still mark what is left as ended by shutdown.
            self.runner.cancel_all("shutdown")

    def begin_shutdown(self) -> None:
        """Refuse new sends from now on, and bodies still arriving soon; runs carry on
        (:meth:`drain` ends them)."""
        self.bodies.close()
        self.final_writes.close()
        self.runner.begin_shutdown()

    # --- ASGI -----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await route(self, scope, receive, send)  # (the routes: http_routes.py)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:  # websocket: not part of A2A
            await send({"type": "websocket.close", "code": 1000})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        started = False
        try:
            async with self.running():
                await send({"type": "lifespan.startup.complete"})
                started = True
                while (await receive())["type"] != "lifespan.shutdown":
                    pass
                self.lifespan_ending.set()
        except Exception as exc:
            log.exception("lifespan failed")
            failed = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
            await send({"type": failed, "message": repr(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    # --- cards ----------------------------------------------------------------------------

    @property
    def public_url(self) -> str | None:
        """The URL the card advertises (None: taken from each request)."""
        return self.cards.public_url

    @public_url.setter
    def public_url(self, url: str | None) -> None:
        self.cards.public_url = url

    @property
    def card_overrides(self) -> dict[str, Any]:
        """The card fields this app sets over the generated card (a copy)."""
        return dict(self.cards.fields)


