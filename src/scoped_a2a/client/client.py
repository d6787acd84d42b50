"""``A2AClient``: call one A2A agent over JSON-RPC (1.0, or 0.3 when its card offers only that),
over HTTP+JSON or over gRPC (1.0; when the card lists it first, or ``transport="rest"`` /
``"grpc"``).

Works under asyncio and trio (httpx over AnyIO). The client reads the agent card on first use and
picks the interface and version from it (:mod:`.connection` holds the card and the transport;
the choice itself is :mod:`.card`'s); every method then speaks that version, and results come
back in the 1.0 model whichever version carried them. Remote errors are raised as
:class:`~scoped_a2a.A2AError` subclasses carrying the JSON-RPC code; transport failures as
:class:`~scoped_a2a.client.errors.TransportError` subclasses.

Streams (``stream``, ``subscribe``) are async context managers handing out an
:class:`~.streams.EventStream`; leaving the ``async with`` closes the response.

Cancellation: every method can be cancelled at any point; the request is abandoned and its
connection closed. A send or stream given up on (cancelled, its deadline passed, or ended by an
exception) before its task settled also has the remote task cancelled, unless its run is
detached: the abandon rule of :mod:`.abandon`, which ``cancel_abandoned=False`` switches off.
A blocking send to an agent that streams but does not cancel on a hang-up is carried as a stream
whose events are collected, so its task id is known in time to cancel it.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar

import anyio
import httpx
import msgspec

from ..protocol.errors import (
    InvalidAgentResponse,
    ServerUnavailable,
    UnsupportedOperation,
)
from ..protocol.ids import new_id
from ..protocol.resend import IDEMPOTENT_SEND_EXTENSION_URI
from ..protocol.trajectory import TRAJECTORY_READ_METHOD, TrajectoryRead
from ..protocol.types import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskState,
)
from .abandon import CANCEL_TIMEOUT, RemoteTask, caller_detached, cancels_on_hangup, note
from .auth import Auth
from .backoff import Backoff
from .card import AgentCard
from .card_verify import CardVerifier
from .connection import AgentConnection
from .errors import AgentUnreachable
from .pages import LivePage, WirePage
from .streams import EventStream

SEND_BACKOFF = Backoff(initial=0.1, factor=2.0, cap=2.0, jitter=0.5)
"""How long a send waits before it is resent after a connection error (per attempt)."""

T = TypeVar("T")

_page_decoder = msgspec.json.Decoder(WirePage)
_encode = msgspec.json.Encoder().encode


def user_message(
    text: str, *, context_id: str | None = None, task_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Message:
    """A user message with one text part and a fresh id."""
    return Message(
        message_id=new_id(), role=Role.USER, parts=[Part(text=text)],
        context_id=context_id, task_id=task_id, metadata=metadata,
    )


class A2AClient(AgentConnection):
    """A client of the agent at ``url`` (its base URL, where the card is served).

    :param http: an ``httpx.AsyncClient`` to use (and not close); one is created and owned
        otherwise. A client you pass keeps its own httpx timeouts besides the ones here.
    :param card: the agent card, if you have it (no card fetch then).
    :param version: force ``"1.0"`` or ``"0.3"`` (the card must offer it).
    :param rpc_url: POST here instead of the URL the card names.
    :param timeout: seconds for one call (the headers of a stream); None for no deadline.
    :param stream_idle_timeout: seconds a stream may stay silent before it fails.
    :param extensions: extension URIs to activate on every call (``A2A-Extensions``).
    :param transport: ``"jsonrpc"``, ``"rest"`` (HTTP+JSON, 1.0) or ``"grpc"`` (1.0, needs
        the ``[grpc]`` extra) to force a binding; by default the card's order decides (the
        first 1.0 interface it lists in a binding this client speaks).
    :param ssl_context: TLS settings for a gRPC interface over TLS (HTTP calls use the httpx
        client's); ALPN ``h2`` is set on it. Default: httpx's default trust.
    :param headers: extra headers on every request.
    :param auth: the credential sent with every request (the card fetch included): a
        :class:`~.auth.BearerToken`, an :class:`~.auth.ApiKey`, a string (a bearer token) or
        any ``httpx.Auth``. When the agent answers 401/403 the client raises
        ``Unauthenticated`` / ``PermissionDenied`` naming the credentials its card accepts.
    :param verify_card: refuse a card none of whose signatures verifies with these trusted
        keys (:class:`~.card_verify.CardVerifier`): ``CardSignatureError`` before any call.
    :param send_retries: how many times ``send`` and ``stream`` resend a message (same
        ``messageId``) after a connection error, or -32000 "try again", before the first
        answer; only to an agent whose card declares idempotent sends (a resend is then the
        same send, never a second run: docs/exactly-once.md). 0: never.
    :param send_backoff: the wait before each resend.
    :param cancel_abandoned: a send or stream given up on before its task settled cancels the
        task (``CancelTask``, shielded, at most ``cancel_timeout`` s) unless its run is detached
        (:mod:`.abandon`); False: giving up only hangs up.
    """

    def __init__(
        self,
        url: str,
        *,
        http: httpx.AsyncClient | None = None,
        card: AgentCard | None = None,
        version: str | None = None,
        rpc_url: str | None = None,
        timeout: float | None = 30.0,
        stream_idle_timeout: float | None = None,
        extensions: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        transport: str | None = None,
        auth: Auth | None = None,
        verify_card: CardVerifier | None = None,
        send_retries: int = 3,
        send_backoff: Backoff = SEND_BACKOFF,
        cancel_abandoned: bool = True,
        cancel_timeout: float = CANCEL_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if send_retries < 0:  # before the connection: it may create an httpx client
            raise ValueError("send_retries must not be negative")
        super().__init__(
            url, http=http, card=card, version=version, rpc_url=rpc_url, timeout=timeout,
            stream_idle_timeout=stream_idle_timeout, extensions=extensions, headers=headers,
            transport=transport, auth=auth, verify_card=verify_card, ssl_context=ssl_context)
        self.send_retries = send_retries
        self.send_backoff = send_backoff
        self.cancel_abandoned = cancel_abandoned
        self.cancel_timeout = cancel_timeout
        self.resends = 0
        """How many times a message was resent after a connection error (tests, metrics)."""

    async def __aenter__(self) -> A2AClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _resending(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` (one send of a message), made again after a failure that allows it,
        with a wait before each resend; the last failure is raised.

        Only a connection error or -32000 (shutting down, or "try again") is retried, at most
        ``send_retries`` times, and only to an agent that declares idempotent sends: elsewhere
        a resend may run the message twice. Cancellation: propagates (mid-attempt or waiting).
        """
        failures = 0
        while True:
            try:
                return await attempt()
            except (AgentUnreachable, ServerUnavailable):
                failures += 1
                card = self._card
                if failures > self.send_retries or card is None or \
                        not card.offers_extension(IDEMPOTENT_SEND_EXTENSION_URI):
                    raise
            self.resends += 1
            await anyio.sleep(self.send_backoff.delay(failures))

    # --- the A2A methods -------------------------------------------------------------------

    def _send_request(
        self, message: Message, *, return_immediately: bool, history_length: int | None,
        metadata: dict[str, Any] | None, accepted_output_modes: list[str] | None,
    ) -> SendMessageRequest:
        cfg = SendMessageConfiguration(
            return_immediately=return_immediately, history_length=history_length,
            accepted_output_modes=accepted_output_modes,
        )
        return SendMessageRequest(message=message, configuration=cfg, metadata=metadata)

    async def send(
        self, message: Message | str, *, return_immediately: bool = False,
        history_length: int | None = None, metadata: dict[str, Any] | None = None,
        accepted_output_modes: list[str] | None = None,
    ) -> Task | Message:
        """Send a message; return the task (ended or interrupted, unless ``return_immediately``)
        or the agent's direct reply message. A blocking send has no deadline of its own (it
        lasts as long as the agent works): bound it with ``anyio.fail_after`` if you want.

        Given up on (cancelled, or its deadline passed) before the task settled, the task is
        cancelled by the abandon rule (:mod:`.abandon`; the outcome is logged and in the
        exception's notes). A blocking call learns its task id only with its answer: in 1.0
        the task is then found with ``ListTasks`` in the message's context (one made for it
        when it starts a conversation); an agent that speaks only 0.3 (no ListTasks) and
        streams gets the send as a stream whose events are collected into the task returned.
        """
        msg = user_message(message) if isinstance(message, str) else message
        transport, codec = await self._rpc()
        remote: RemoteTask | None = None
        if not return_immediately and self.cancel_abandoned:
            card = await self.card()
            if not cancels_on_hangup(card, metadata, msg.metadata):
                if codec.version != "1.0" and card.streaming:
                    return await self._send_as_stream(
                        msg, history_length=history_length, metadata=metadata,
                        accepted_output_modes=accepted_output_modes)
                remote = self.remote_task(msg, held=True, metadata=metadata)
                msg = remote.bind(msg)
        req = self._send_request(
            msg, return_immediately=return_immediately, history_length=history_length,
            metadata=metadata, accepted_output_modes=accepted_output_modes)
        params = codec.send_params(req)  # one messageId for every attempt
        try:
            raw = await self._resending(
                lambda: transport.call(codec.send_method, params, bounded=return_immediately))
        except BaseException as exc:
            if remote is not None:
                note(exc, await remote.abandon())
            raise
        return codec.send_result(raw)

    async def _send_as_stream(
        self, msg: Message, *, history_length: int | None, metadata: dict[str, Any] | None,
        accepted_output_modes: list[str] | None,
    ) -> Task | Message:
        """A blocking send carried as a stream: its events folded into the task, which is
        returned once it settles (polled with ``GetTask`` if the stream closes before)."""
        remote = self.remote_task(msg, held=True, metadata=metadata)
        try:
            async with self.stream(
                msg, history_length=history_length, metadata=metadata,
                accepted_output_modes=accepted_output_modes, owner=remote,
            ) as events:
                async for _ in events:  # each folded into remote by the stream
                    if remote.settled:
                        break
            failures = 0
            while not remote.settled:
                if remote.task is None:
                    raise InvalidAgentResponse(
                        f"the agent at {self.url} closed the stream without a task or message")
                failures += 1
                await anyio.sleep(SEND_BACKOFF.delay(min(failures, 5)))
                remote.see(await self.get_task(remote.task.id))
        except BaseException as exc:
            note(exc, await remote.abandon())
            raise
        result = remote.message or remote.task
        assert result is not None
        return result

    def remote_task(
        self, message: Message | str, *, held: bool, metadata: dict[str, Any] | None = None,
        return_immediately: bool = False, previous: Task | None = None,
        enabled: bool | None = None,
    ) -> RemoteTask:
        """A :class:`~.abandon.RemoteTask` for a send of ``message`` by this client: what an
        owner keeps to apply the abandon rule (``enabled`` defaults to ``cancel_abandoned``).
        Whether a hang-up cancels is read from the card, which must have been fetched."""
        card = self._card
        msg_meta = message.metadata if isinstance(message, Message) else None
        return RemoteTask(
            self, held=held, previous=previous, timeout=self.cancel_timeout,
            enabled=self.cancel_abandoned if enabled is None else enabled,
            detached=caller_detached(return_immediately=return_immediately,
                                     request_metadata=metadata,
                                     message_metadata=msg_meta),
            hangup_cancels=card is not None and cancels_on_hangup(card, metadata, msg_meta),
            continues=isinstance(message, Message) and message.task_id is not None,
        )

    @asynccontextmanager
    async def stream(
        self, message: Message | str, *, history_length: int | None = None,
        metadata: dict[str, Any] | None = None, accepted_output_modes: list[str] | None = None,
        extensions: Sequence[str] = (), cancel_abandoned: bool | None = None,
        owner: RemoteTask | None = None,
    ) -> AsyncIterator[EventStream]:
        """Send a message as a stream: ``async with client.stream(msg) as events: async for e
        in events``. The first event is the task (or the only one, a direct reply message; for a
        continued task some agents begin with a status update); the stream ends after the task
        ends or needs input. Leaving the block hangs up.

        Leaving it by an exception or a cancellation before the task settled is an abandon: the
        task is cancelled unless its run is detached (:mod:`.abandon`; ``cancel_abandoned``
        overrides the client's setting for this stream). Leaving it normally (``break``, or
        returning from the block) is not. ``owner``: the :class:`~.abandon.RemoteTask` of an
        owner that applies the rule itself (a step's turn, ``ctx.call``): the stream's events
        are folded into it, and nothing is abandoned here.

        Where the rule would send a CancelTask, a cancellation that lands before the first
        event lets the read in flight finish (at most ``cancel_timeout`` s): that event names
        the task, which is then cancelled rather than left running.

        Opening the stream is retried like ``send`` (a resend attaches to the same task); once
        it is open, a broken stream is the caller's to resume (``subscribe``)."""
        transport, codec = await self._rpc()
        msg = user_message(message) if isinstance(message, str) else message
        remote = owner if owner is not None else self.remote_task(
            msg, held=True, metadata=metadata, enabled=cancel_abandoned)
        if codec.version == "1.0":  # (0.3 cannot list tasks: nothing to find them by)
            msg = remote.bind(msg)  # its own context, to find the task if no answer names it
        req = self._send_request(
            msg, return_immediately=False, history_length=history_length,
            metadata=metadata, accepted_output_modes=accepted_output_modes)
        params = codec.send_params(req)  # one messageId for every attempt
        try:
            async with AsyncExitStack() as stack:
                response = await self._resending(lambda: stack.enter_async_context(
                    transport.stream(codec.stream_method, params, extensions=extensions)))
                events = self._events(response, transport, codec)
                events.observe = lambda item: remote.see(item.event)
                if remote.wants_id:
                    events.protect_first = remote.timeout
                try:
                    yield events
                finally:
                    await events.aclose()
        except BaseException as exc:
            # After the response is closed: a server that cancels on a hang-up has seen one.
            if owner is None:
                note(exc, await remote.abandon())
            raise

    @asynccontextmanager
    async def subscribe(
        self, task_id: str, *, last_event_id: int | None = None,
        extensions: Sequence[str] = (),
    ) -> AsyncIterator[EventStream]:
        """Subscribe to a task's events. Without ``last_event_id`` the first event is the task;
        with it, the agent resumes after that position (if it keeps positions)."""
        transport, codec = await self._rpc()
        async with transport.stream(
            codec.subscribe_method, codec.id_params(task_id), last_event_id=last_event_id,
            extensions=extensions,
        ) as response:
            events = self._events(response, transport, codec)
            try:
                yield events
            finally:
                await events.aclose()

    async def get_task(self, task_id: str, *, history_length: int | None = None) -> Task:
        transport, codec = await self._rpc()
        raw = await transport.call(codec.get_method, codec.get_params(task_id, history_length))
        return codec.task_result(raw)

    async def cancel(self, task_id: str, *, metadata: dict[str, Any] | None = None) -> Task:
        """Cancel a task; return it (canceled). TaskNotCancelable if it has already ended."""
        transport, codec = await self._rpc()
        raw = await transport.call(codec.cancel_method, codec.id_params(task_id, metadata))
        return codec.task_result(raw)

    async def list_tasks(
        self, *, context_id: str | None = None, status: TaskState | None = None,
        page_size: int | None = None, page_token: str | None = None,
        history_length: int | None = None, include_artifacts: bool = False,
    ) -> ListTasksResponse:
        """One page of the agent's tasks, newest first (1.0 only: 0.3 has no such method)."""
        transport, codec = await self._rpc()
        if codec.version != "1.0":
            raise UnsupportedOperation("ListTasks has no A2A 0.3 JSON-RPC method")
        req = ListTasksRequest(
            context_id=context_id, status=status, page_size=page_size, page_token=page_token,
            history_length=history_length, include_artifacts=include_artifacts)
        raw = await transport.call("ListTasks", _encode(req))
        return codec.list_result(raw)

    async def read_trajectory(
        self, task_id: str, after: int = 0, *, max_events: int | None = None,
        max_bytes: int | None = None,
    ) -> LivePage:
        """One cursor read of a task's live trajectory (the agent's trajectory extension).

        Returns the events after ``after`` (bounded by the agent's and these limits; the first
        one always), the cursor for the next read, and the task's state. TaskNotFound when the
        agent no longer knows the task.
        """
        transport, _ = await self._rpc()
        params = _encode(TrajectoryRead(
            task_id=task_id, after=after, max_events=max_events, max_bytes=max_bytes))
        raw = await transport.call(TRAJECTORY_READ_METHOD, params)
        try:
            page = _page_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InvalidAgentResponse(f"the trajectory page is invalid: {exc}") from None
        return LivePage(task_id, after, page.next, page.events, page.state, page.has_more)


__all__ = ["SEND_BACKOFF", "A2AClient", "user_message"]
