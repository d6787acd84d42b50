"""HTTP+JSON (REST) over HTTP: the client side of A2A 1.0's REST binding.

:class:`RestTransport` has the interface of :class:`~.rpc.RpcTransport` (``call`` returning the
raw result, ``stream`` handing out the open SSE response), so :class:`~.client.A2AClient` and its
codecs do not care which binding carries a call: each 1.0 method name and its JSON params are
turned into the route, query and body the binding wants. A method REST has no route for (our
trajectory read) goes to the agent's JSON-RPC interface when its card offers one.

Failures map as on JSON-RPC: an error body (``google.rpc.Status`` with an ErrorInfo reason) is
raised as the same :class:`A2AError` subclass; another non-200 as :class:`AgentHTTPError`;
transport trouble as :class:`AgentUnreachable` / :class:`AgentTimeout`. Every wait has a deadline
on an AnyIO cancel scope; a cancelled call leaves nothing behind (httpx drops the connection).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn
from urllib.parse import quote

import httpx
import msgspec

from ..observe.propagation import client_span
from ..protocol.errors import (
    InvalidAgentResponse,
    PermissionDenied,
    Unauthenticated,
    UnsupportedOperation,
)
from ..protocol.rest_errors import error_from_rest
from ..timeouts import fail_after
from .errors import AgentHTTPError
from .rpc import RpcTransport, transport_error
from .sse import SSEEvent


def raise_for_rest(status: int, body: bytes) -> NoReturn:
    """Raise for a non-200 REST answer: its A2A error if the body is one, else AgentHTTPError."""
    err = error_from_rest(status, body)
    if err is not None:
        raise err
    detail = body[:200].decode("utf-8", errors="replace").strip()
    raise AgentHTTPError(status, detail)


def unwrap_rest_event(sse: SSEEvent) -> bytes:
    """The StreamResponse JSON of one REST SSE event; an ``error`` event raises its error."""
    data = sse.data.encode()
    if sse.event == "error":
        raise_for_rest(500, data)
    return data


def _seg(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidAgentResponse("a task id is required")  # pragma: no cover (our own call)
    return quote(value, safe="")


def _query(params: Mapping[str, Any], drop: Sequence[str] = ()) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if key in drop or value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, list):
            out[key] = ",".join(str(v) for v in value)
        else:
            out[key] = str(value)
    return out


class RestTransport:
    """Calls one agent's HTTP+JSON interface (1.0), over a shared httpx client.

    :param fallback: the JSON-RPC transport for methods without a REST route (None: such a
        call raises UnsupportedOperation).
    """

    version = "1.0"

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        *,
        timeout: float | None,
        extensions: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        fallback: RpcTransport | None = None,
        auth: httpx.Auth | None = None,
        on_refused: Callable[[int, bytes], str] | None = None,
    ) -> None:
        self.http = http
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.fallback = fallback
        self.auth = auth
        self._on_refused = on_refused
        self._headers = {"A2A-Version": self.version, **(headers or {})}
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

    def _route(self, method: str, params: bytes) -> tuple[str, str, dict[str, str], bytes | None]:
        """(HTTP verb, path, query, body) for a 1.0 method and its JSON params."""
        if method == "SendMessage":
            return "POST", "/message:send", {}, params
        if method == "SendStreamingMessage":
            return "POST", "/message:stream", {}, params
        p: dict[str, Any] = msgspec.json.decode(params) if params else {}
        if method == "GetTask":
            return "GET", f"/tasks/{_seg(p.get('id'))}", _query(p, ("id",)), None
        if method == "ListTasks":
            return "GET", "/tasks", _query(p), None
        if method == "CancelTask":
            return "POST", f"/tasks/{_seg(p.get('id'))}:cancel", {}, params
        if method == "SubscribeToTask":
            return "POST", f"/tasks/{_seg(p.get('id'))}:subscribe", {}, None
        raise UnsupportedOperation(f"{method} has no HTTP+JSON route")

    async def call(self, method: str, params: bytes, *, bounded: bool = True) -> bytes:
        """One call; return its raw result JSON (``bounded=False``: no deadline)."""
        try:
            verb, path, query, body = self._route(method, params)
        except UnsupportedOperation:
            if self.fallback is None:
                raise
            return await self.fallback.call(method, params, bounded=bounded)
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        url = self.url + path
        with client_span(method, url, headers):  # W3C trace context, when traced
            try:
                with fail_after(self.timeout if bounded else None):
                    response = await self.http.request(
                        verb, url, params=query or None, content=body, headers=headers,
                        **self._auth_kw())
            except (TimeoutError, httpx.TransportError) as exc:
                raise transport_error(exc, url) from None
            if response.status_code != 200:
                self._raise_refused(response.status_code, response.content)
                raise_for_rest(response.status_code, response.content)
            return response.content

    @asynccontextmanager
    async def stream(
        self, method: str, params: bytes, *, last_event_id: int | None = None,
        extensions: Sequence[str] = (),
    ) -> AsyncIterator[httpx.Response]:
        """Open a streaming call; hand out the ``text/event-stream`` response.

        The deadline covers the answer's headers only. An up-front error (a JSON error body) is
        raised here. The response is closed on exit, whatever the exit.
        """
        verb, path, _, body = self._route(method, params)
        headers = dict(self._headers, Accept="text/event-stream")
        headers["Cache-Control"] = "no-store"
        if body is not None:
            headers["Content-Type"] = "application/json"
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        if extensions:
            headers["A2A-Extensions"] = ", ".join(extensions)
        url = self.url + path
        with client_span(method, url, headers):  # W3C trace context, when traced
            request = self.http.build_request(verb, url, content=body, headers=headers)
            try:
                with fail_after(self.timeout):
                    response = await self.http.send(request, stream=True, **self._auth_kw())
            except (TimeoutError, httpx.TransportError) as exc:
                raise transport_error(exc, url) from None
            try:
                ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code != 200 or ctype != "text/event-stream":
                    try:
                        with fail_after(self.timeout):
                            content = await response.aread()
                    except (TimeoutError, httpx.TransportError) as exc:
                        raise transport_error(exc, url) from None
                    if response.status_code != 200:
                        self._raise_refused(response.status_code, content)
                        raise_for_rest(response.status_code, content)
                    raise InvalidAgentResponse(
                        "the agent answered a streaming call without a stream")
                yield response
            finally:
                await response.aclose()

    unwrap = staticmethod(unwrap_rest_event)
    """How this binding's SSE events are read (for :class:`~.streams.EventStream`)."""


__all__ = ["RestTransport", "raise_for_rest", "unwrap_rest_event"]
