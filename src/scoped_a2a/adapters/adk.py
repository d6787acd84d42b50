"""Serve an unchanged Google ADK agent: ``A2AApp(from_adk(agent))`` (extra ``adk``).

The agent runs through ADK's own ``Runner`` (``run_async``, SSE streaming), cancelled with the
run, so every rule of this server applies to it: a hang-up of an interactive run, a CancelTask,
the caller's deadline or the end of the shutdown grace period cancels the ADK run, and with it
the model call in flight. Detached runs finish whoever hangs up. A run whose tool ignores
cancellation is abandoned after ``cancel_grace`` (see :meth:`AdkAgent.run`).

- Sessions: one ADK session per A2A context id and caller, created on first use in the session
  service given (ADK's ``InMemorySessionService`` by default), so a follow-up in the same
  context sees the earlier turns and one caller never reads another's session. ADK's
  ``user_id`` is the caller's principal id (and tenant, if any: :func:`user_id_of`); without
  authentication it is ``A2A_USER_<context id>``, as ADK's own A2A executor does, so ``user:``
  state and memory are never shared between anonymous conversations. The turns of one session
  run one at a time, in the order they arrive (a follow-up sent while a turn runs waits for
  it, ``working``).
- The request's metadata (with the message's) reaches tools and callbacks as
  ``run_config.custom_metadata["a2a_metadata"]``, where ADK's own executor puts it.
- What the caller sees: model text streamed as artifact chunks, tool calls and results as
  live-trajectory events, the last answer as the reply (:mod:`.adk_events`).
- ADK is built on asyncio: the adapted agent runs on ``--backend asyncio`` only; on trio a run
  fails with a one-line reason (and ``serve`` refuses to start it).

This module imports ``google.adk`` only when an agent is adapted (:func:`recognises` never does).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from ..protocol.principal import TENANT_SEPARATOR
from .base import AdaptedAgent
from .trajectory import MEDIA_INPUT_MODES

if TYPE_CHECKING:
    from google.adk.agents import BaseAgent, RunConfig
    from google.adk.artifacts import BaseArtifactService
    from google.adk.memory import BaseMemoryService
    from google.adk.sessions import BaseSessionService

    from ..runtime.context import RunContext
    from .adk_events import Relay

CANCEL_GRACE = 2.0
"""Seconds a cancelled ADK run may take to end (a tool that ignores cancellation) before it is
abandoned: the task is recorded canceled and the run's slot freed."""

METADATA_KEY = "a2a_metadata"
"""Where a run's A2A metadata is in ADK's ``RunConfig.custom_metadata`` (ADK's own key)."""


def user_id_of(ctx: RunContext) -> str:
    """ADK's ``user_id`` for the run's caller: its principal id, or, for a caller without one
    (no authentication), ``A2A_USER_<context id>`` as ADK's own A2A executor uses; within a
    tenant, followed by the tenant as in the task's owner key (so tenants never share)."""
    user = ctx.principal.id or f"A2A_USER_{ctx.context_id}"
    return f"{user}{TENANT_SEPARATOR}{ctx.tenant}" if ctx.tenant else user


def recognises(obj: object) -> bool:
    """True when ``obj`` is a Google ADK agent (a ``google.adk.agents.BaseAgent`` instance).

    Never imports ADK: an object cannot be an ADK agent unless ADK is already imported.
    """
    module = sys.modules.get("google.adk.agents.base_agent")
    base = getattr(module, "BaseAgent", None)
    return isinstance(base, type) and isinstance(obj, base)


def from_adk(
    agent: BaseAgent,
    *,
    session_service: BaseSessionService | None = None,
    app_name: str | None = None,
    artifact_service: BaseArtifactService | None = None,
    memory_service: BaseMemoryService | None = None,
    name: str | None = None,
    description: str | None = None,
    skills: Sequence[dict[str, Any]] | None = None,
    run_config: RunConfig | None = None,
    cancel_grace: float = CANCEL_GRACE,
) -> AdkAgent:
    """Adapt the ADK ``agent`` (any ``BaseAgent``: an ``LlmAgent``, a workflow agent...) into
    an agent this server runs.

    ``session_service`` keeps the conversations (ADK's ``InMemorySessionService`` by default:
    lost on restart); ``app_name`` names the app in it (default: the agent's name);
    ``artifact_service`` and ``memory_service`` are handed to ADK's ``Runner`` as given.
    ``name``, ``description`` and ``skills`` (A2A card skill objects: ``id``, ``name``,
    ``description``, ``tags``) override what the card takes from the agent. ``run_config``:
    ADK's ``RunConfig`` for every run (``max_llm_calls``, ``tool_thread_pool_config``...); its
    ``streaming_mode`` is SSE unless it sets one (``NONE``: each model response arrives whole).
    ``cancel_grace``: seconds a cancelled run may take to end before it is abandoned (left
    running in the server nursery, logged; the task is recorded canceled meanwhile).

    Raises TypeError when ``agent`` is not an ADK agent, ValueError for a ``run_config`` in
    live (``BIDI``) streaming mode, which ``run_async`` does not serve.
    """
    from google.adk.agents import BaseAgent
    from google.adk.agents import RunConfig as AdkRunConfig
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    if not isinstance(agent, BaseAgent):
        raise TypeError(f"from_adk takes a Google ADK agent (google.adk.agents.BaseAgent), "
                        f"not {type(agent).__name__}")
    sessions = session_service if session_service is not None else InMemorySessionService()
    runner = Runner(app_name=app_name or agent.name, agent=agent, session_service=sessions,
                    artifact_service=artifact_service, memory_service=memory_service)
    card: dict[str, Any] = {"name": name or agent.name}
    if description or agent.description:
        card["description"] = description or agent.description
    card["skills"] = list(skills) if skills is not None else default_skills(agent)
    # The caller's file parts reach the model inline or by URL (adk_events.to_content): the
    # card accepts what is forwarded.
    card["defaultInputModes"] = list(MEDIA_INPUT_MODES)
    config = run_config if run_config is not None else AdkRunConfig()
    if "streaming_mode" not in config.model_fields_set:
        # By value: StreamingMode moved between ADK versions; "sse" streams the model's text.
        config = config.model_copy(update={"streaming_mode": type(
            config.streaming_mode)("sse")})
    elif config.streaming_mode.value == "bidi":
        raise ValueError("from_adk runs agents with run_async: streaming_mode BIDI (live) is "
                         "not supported; use SSE or NONE")
    return AdkAgent(runner, config, card, cancel_grace=cancel_grace)


def default_skills(agent: BaseAgent) -> list[dict[str, Any]]:
    """Card skills of an ADK agent: one per sub-agent, or the agent itself without any."""
    return [_skill(sub) for sub in agent.sub_agents] or [_skill(agent)]


def _skill(agent: BaseAgent) -> dict[str, Any]:
    kind = type(agent).__name__.removesuffix("Agent").lower() or "agent"
    return {"id": agent.name, "name": agent.name,
            "description": agent.description or f"The {agent.name} agent.", "tags": [kind]}


class AdkAgent(AdaptedAgent):
    """A Google ADK agent served through its ``Runner`` (made by :func:`from_adk`)."""

    framework: ClassVar[str] = "Google ADK"
    backends: ClassVar[frozenset[str]] = frozenset({"asyncio"})

    def __init__(self, runner: Any, run_config: Any, card: dict[str, Any], *,
                 cancel_grace: float = CANCEL_GRACE) -> None:
        self.runner = runner
        """ADK's ``Runner`` (its ``session_service`` holds the conversations)."""
        self.run_config = run_config
        self._card = card
        self.cancel_grace = cancel_grace
        self._turns = _Turns()

    def card_fields(self) -> dict[str, Any]:
        return dict(self._card)

    async def run(self, ctx: RunContext) -> str | None:
        """One ADK turn for the run's message; returns the last answer's text.

        Cancellation (hang-up, CancelTask, deadline, shutdown) lands in ADK's event stream,
        which is closed on the way out: ADK cancels the agent's own task and the model call
        in flight with it. A run that has not ended ``cancel_grace`` seconds later (a tool
        that ignores cancellation) is abandoned in the server nursery, logged, and the
        cancellation goes on. What ADK recorded in the session until then stays. Errors: what
        the agent raises fails the run (the caller sees its type and an error id); a model
        error fails it with the error code (:class:`~scoped_a2a.AgentError`).
        """
        from .adk_events import Relay, to_content

        user_id = user_id_of(ctx)
        content = to_content(ctx.message)
        run_config = self.run_config
        if ctx.metadata and "custom_metadata" in type(run_config).model_fields:
            run_config = run_config.model_copy(update={"custom_metadata": {
                **(run_config.custom_metadata or {}), METADATA_KEY: ctx.metadata}})
        relay = Relay(ctx)
        async with self._turns.turn((user_id, ctx.context_id)):
            await self._session(user_id, ctx.context_id)
            # ADK waits for its own task when its stream closes: a tool that ignores
            # cancellation would hold the run, so the stream is driven from the server
            # nursery and abandoned after cancel_grace (runtime/abandon.py).
            await ctx.run_abandonable(
                functools.partial(
                    self._drive, relay, user_id, ctx.context_id, content, run_config),
                cancel_grace=self.cancel_grace, name=f"Google ADK run of task {ctx.task_id}")
        return await relay.end()

    async def _drive(self, relay: Relay, user_id: str, session_id: str, content: Any,
                     run_config: Any) -> None:
        events = self.runner.run_async(user_id=user_id, session_id=session_id,
                                       new_message=content, run_config=run_config)
        # aclosing: a run that stops early (cancelled, or a relay error) still closes ADK's
        # generator here, which cancels the agent's task, instead of leaving it to the
        # garbage collector.
        async with aclosing(events):
            async for event in events:
                await relay.feed(event)

    async def _session(self, user_id: str, session_id: str) -> None:
        """Create the session on its first turn (ADK's ``auto_create_session`` is newer than
        the ADK versions supported)."""
        service = self.runner.session_service
        app_name = self.runner.app_name
        if await service.get_session(app_name=app_name, user_id=user_id,
                                     session_id=session_id) is None:
            await service.create_session(app_name=app_name, user_id=user_id,
                                         session_id=session_id)


class _Turns:
    """One turn at a time per session: two turns of one conversation at once would each
    answer without the other, and ADK's session services do not expect concurrent writers.
    A lock per session, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def turn(self, key: tuple[str, str]) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        lock = lock or anyio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
