"""JSON-RPC over HTTP: one POST per call, or one POST answered by an SSE stream.

Every wait has a deadline on an AnyIO cancel scope (never ``wait_for``). Failures are mapped once,
here: transport trouble -> :class:`AgentUnreachable` / :class:`AgentTimeout`; a JSON-RPC error ->
the shared :class:`A2AError` subclass for its code; an HTTP error status without a JSON-RPC error
-> :class:`AgentHTTPError`; an answer that is not JSON-RPC -> ``InvalidAgentResponse``.

Cancellation: a cancelled call leaves nothing behind; httpx drops (and closes) the connection of
an unfinished request rather than reusing it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import httpx
import msgspec

from ..observe.propagation import client_span
from ..protocol.errors import (
    A2AError,
    InvalidAgentResponse,
    PermissionDenied,
    Unauthenticated,
    error_from_code,
)
from ..protocol.ids import new_id
from ..timeouts import fail_after
from .errors import AgentHTTPError, AgentTimeout, AgentUnreachable


class RpcError(msgspec.Struct):
    code: int
    message: str = ""
    data: Any = None


class RpcAnswer(msgspec.Struct):
    """A JSON-RPC response: ``result`` (kept raw for the dialect to decode) or ``error``."""

    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: RpcError | None = None


_answer_decoder = msgspec.json.Decoder(RpcAnswer)


def decode_answer(body: bytes | str) -> bytes:
    """The raw ``result`` of a JSON-RPC answer; raises its remote error or InvalidAgentResponse."""
    try:
        answer = _answer_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidAgentResponse(f"the agent's answer is not JSON-RPC: {exc}") from None
    if answer.error is not None:
        raise error_from_code(answer.error.code, answer.error.message, answer.error.data)
    if answer.result is msgspec.UNSET:
        return b"null"  # a result-less success (an a2a-sdk quirk on some 0.3 answers)
    return bytes(answer.result)


def raise_for_http(status: int, body: bytes) -> NoReturn:
    """Raise for a non-200 answer: its JSON-RPC error if it carries one, else AgentHTTPError."""
    try:
        answer = _answer_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        answer = None
    if answer is not None and answer.error is not None:
        raise error_from_code(answer.error.code, answer.error.message, answer.error.data)
    detail = body[:200].decode("utf-8", errors="replace").strip()
    raise AgentHTTPError(status, detail)


def transport_error(exc: BaseException, url: str) -> AgentUnreachable:
    """The client's error for an httpx transport failure or a deadline."""
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return AgentTimeout(f"the agent at {url} did not answer in time")
    return AgentUnreachable(f"cannot reach the agent at {url}: {type(exc).__name__}: {exc}")


class RpcTransport:
    """Calls one JSON-RPC endpoint in one protocol version, over a shared httpx client."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        version: str,
        *,
        timeout: float | None,
        extensions: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | None = None,
        on_refused: Callable[[int, bytes], str] | None = None,
    ) -> None:
        self.http = http
        self.auth = auth
        self._on_refused = on_refused
        self.url = url
        self.version = version
        self.timeout = timeout
        self._headers = {"A2A-Version": version, "Content-Type": "application/json",
                         **(headers or {})}
        if extensions:
            self._headers["A2A-Extensions"] = ", ".join(extensions)

    def _auth_kw(self) -> dict[str, Any]:
        # Only when set: otherwise the httpx client's own auth (if any) applies.
        return {"auth": self.auth} if self.auth is not None else {}

    def _raise_refused(self, status: int, body: bytes) -> None:
        """On 401/403, raise the error that says which credential the agent's card wants (and
        what the agent said was wrong with the one sent, when it said)."""
        if status in (401, 403) and self._on_refused is not None:
            cls = Unauthenticated if status == 401 else PermissionDenied
            raise cls(self._on_refused(status, body))

    def _body(self, method: str, params: bytes) -> bytes:
        return (
            b'{"jsonrpc":"2.0","id":"' + new_id().encode() + b'","method":'
            + msgspec.json.encode(method) + b',"params":' + params + b"}"
        )

    async def call(self, method: str, params: bytes, *, bounded: bool = True) -> bytes:
        """POST one call; return its raw ``result``.

        ``bounded=False`` drops the transport's deadline (a blocking send lasts as long as the
        agent works; its caller bounds it with a cancel scope if it wants).
        """
        deadline = self.timeout if bounded else None
        headers = dict(self._headers)
        with client_span(method, self.url, headers):  # W3C trace context, when traced
            try:
                with fail_after(deadline):
                    response = await self.http.post(
                        self.url, content=self._body(method, params), headers=headers,
                        **self._auth_kw())
            except (TimeoutError, httpx.TransportError) as exc:
                raise transport_error(exc, self.url) from None
            if response.status_code != 200:
                self._raise_refused(response.status_code, response.content)
                raise_for_http(response.status_code, response.content)
            return decode_answer(response.content)

    @asynccontextmanager
    async def stream(
        self, method: str, params: bytes, *, last_event_id: int | None = None,
        extensions: Sequence[str] = (),
    ) -> AsyncIterator[httpx.Response]:
        """POST a streaming call; hand out the open ``text/event-stream`` response.

        The deadline covers the answer's headers only (a stream may be quiet for long). An
        up-front error (a JSON answer instead of a stream) is raised here, before the body of
        the ``async with``. The response is closed on exit, whatever the exit.
        """
        headers = dict(self._headers, Accept="text/event-stream")
        headers["Cache-Control"] = "no-store"
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        if extensions:
            headers["A2A-Extensions"] = ", ".join(extensions)
        with client_span(method, self.url, headers):  # W3C trace context, when traced
            request = self.http.build_request(
                "POST", self.url, content=self._body(method, params), headers=headers)
            try:
                with fail_after(self.timeout):
                    response = await self.http.send(request, stream=True, **self._auth_kw())
            except (TimeoutError, httpx.TransportError) as exc:
                raise transport_error(exc, self.url) from None
            try:
                ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code != 200 or ctype != "text/event-stream":
                    await self._raise_upfront(response)
                yield response
            finally:
                await response.aclose()

    async def _raise_upfront(self, response: httpx.Response) -> NoReturn:
        try:
            with fail_after(self.timeout):
                body = await response.aread()
        except (TimeoutError, httpx.TransportError) as exc:
            raise transport_error(exc, self.url) from None
        if response.status_code != 200:
            self._raise_refused(response.status_code, body)
            raise_for_http(response.status_code, body)
        decode_answer(body)  # raises the JSON-RPC error, if that is what came back
        raise InvalidAgentResponse("the agent answered a streaming call without a stream")


__all__ = ["A2AError", "RpcTransport", "decode_answer"]
