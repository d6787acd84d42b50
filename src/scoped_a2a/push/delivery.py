"""One delivery: POST one payload to one webhook, retrying with capped exponential backoff.

Each attempt re-checks the URL with the SSRF guard and connects to the very address the check
approved (the URL's host is replaced by that address; the ``Host`` header and TLS server name keep
the original name), so a DNS answer that changes after the config was accepted cannot reach a
private address. Redirects are not followed, environment proxies are not used, every connection
is fresh (a pinned connection is never reused for another name), and at most 1 KiB of the
receiver's answer is read.

Outcomes. A 2xx answer delivers. A network error, a timeout, 408, 425, 429 or 5xx is retried
after ``first_backoff * 2**n`` seconds (capped at ``max_backoff``, with jitter: half fixed, half
random, so many failing deliveries do not retry in lockstep; a ``Retry-After`` in seconds is
honoured up to the cap). A redirect, any other 4xx, or a URL that has become unsafe fails at once.
A retry is made only if its whole ``attempt_timeout`` fits before ``retry_for`` seconds have
passed since the first attempt, so a delivery ends within ``max(retry_for, attempt_timeout)``.

Cancellation (shutdown) ends an attempt or a backoff at once; the caller records the delivery as
undelivered.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast

import anyio
import httpx

from ..protocol.types import TaskPushNotificationConfig
from ..timeouts import fail_after
from . import payload as payloads
from .guard import Allowance, WebhookRefused, check_url
from .records import DeliveryRecord
from .settings import PushSettings

log = logging.getLogger("scoped_a2a.push")

_RETRYABLE_STATUS = frozenset({408, 425, 429})
_SNIPPET_BYTES = 1024


@dataclass(frozen=True, slots=True)
class _Outcome:
    delivered: bool = False
    retryable: bool = False
    error: str | None = None
    retry_after: float | None = None


class Sender:
    """Sends deliveries for one app; owns the HTTP client (created on first use)."""

    def __init__(self, settings: PushSettings) -> None:
        self.settings = settings
        self.allowance = Allowance(settings.allow_hosts)
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            s = self.settings
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(connect=s.connect_timeout, read=s.read_timeout,
                                      write=s.read_timeout, pool=s.connect_timeout),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=0),
                follow_redirects=False,
                trust_env=False,  # an HTTP(S)_PROXY in the environment must not bypass the guard
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (shielded, for at most a second: it runs during shutdown,
        maybe under cancellation)."""
        client, self._client = self._client, None
        if client is not None:
            with anyio.move_on_after(1.0, shield=True):
                await client.aclose()

    async def check(self, url: str) -> None:
        """Raise WebhookRefused if ``url`` may not be used (the config-time check)."""
        await check_url(url, self.allowance, self.settings.resolver,
                        resolve_within=self.settings.connect_timeout)

    def backoff(self, retry: int) -> float:
        """Seconds before retry number ``retry`` (1-based): capped, doubling, half jittered."""
        s = self.settings
        full = min(s.max_backoff, s.first_backoff * 2.0 ** min(retry - 1, 62))
        return full / 2 + random.uniform(0, full / 2)

    async def deliver(
        self,
        record: DeliveryRecord,
        body: bytes,
        current_config: Callable[[], Awaitable[TaskPushNotificationConfig | None]],
    ) -> None:
        """Deliver ``body`` until it is delivered, fails, or its time is up; update ``record``.

        ``current_config`` is read before every attempt: a config replaced meanwhile is used as
        it is now, and a deleted one ends the delivery as undelivered.
        """
        s = self.settings
        started = anyio.current_time()
        deadline = started + s.retry_for
        while True:
            config = await current_config()
            if config is None:
                record.finish("undelivered", "the push config was deleted before delivery")
                log.info("push undelivered task=%s config=%s state=%s: config deleted",
                         record.task_id, record.config_id, record.state.name.lower())
                return
            record.url = config.url
            record.attempts += 1
            outcome = await self._attempt(config, record.delivery_id, body, s.attempt_timeout)
            if outcome.delivered:
                record.last_error = None
                record.finish("delivered")
                log.info("push delivered task=%s config=%s state=%s attempts=%d",
                         record.task_id, record.config_id, record.state.name.lower(),
                         record.attempts)
                return
            record.last_error = outcome.error
            elapsed = anyio.current_time() - started
            if not outcome.retryable:
                record.finish("failed", outcome.error)
                log.warning("push failed task=%s config=%s state=%s attempts=%d: %s",
                            record.task_id, record.config_id, record.state.name.lower(),
                            record.attempts, outcome.error)
                return
            delay = self.backoff(record.attempts)
            if outcome.retry_after is not None:
                delay = max(delay, min(outcome.retry_after, s.max_backoff))
            # Retry only if the whole attempt fits before the bound: a retry squeezed into the
            # last milliseconds could only time out.
            if anyio.current_time() + delay + s.attempt_timeout > deadline:
                reason = (f"gave up after {record.attempts} attempts over {elapsed:.1f}s "
                          f"(retry_for={s.retry_for:g}s); last error: {outcome.error}")
                record.finish("failed", reason)
                log.error("push failed task=%s config=%s state=%s: %s", record.task_id,
                          record.config_id, record.state.name.lower(), reason)
                return
            log.info("push attempt %d failed task=%s config=%s: %s; retrying in %.2fs",
                     record.attempts, record.task_id, record.config_id, outcome.error, delay)
            await anyio.sleep(delay)

    async def _attempt(
        self, config: TaskPushNotificationConfig, msg_id: str, body: bytes, budget: float
    ) -> _Outcome:
        s = self.settings
        try:
            with fail_after(max(budget, 0.0)):
                target = await check_url(config.url, self.allowance, s.resolver,
                                         resolve_within=s.connect_timeout)
                host = target.url.netloc.decode("ascii")
                request = self._http().build_request(
                    "POST",
                    target.url.copy_with(host=target.address),
                    content=body,
                    headers=payloads.headers(config, msg_id, body, host=host,
                                             bearer_token=s.bearer_token,
                                             signing_secret=s.signing_secret),
                    extensions={"sni_hostname": target.host} if target.url.scheme == "https"
                    else None,
                )
                response = await self._http().send(request, stream=True)
                try:
                    snippet = await _read_some(response)
                finally:
                    await response.aclose()
        except WebhookRefused as exc:
            return _Outcome(retryable=exc.retryable, error=str(exc))
        except TimeoutError:
            return _Outcome(retryable=True,
                            error=f"no answer within the attempt's {max(budget, 0.0):.2g}s")
        except httpx.TimeoutException as exc:
            return _Outcome(retryable=True, error=f"timed out: {type(exc).__name__}")
        except httpx.TransportError as exc:
            return _Outcome(retryable=True, error=f"{type(exc).__name__}: {exc}")
        code = response.status_code
        if 200 <= code < 300:
            return _Outcome(delivered=True)
        error = f"HTTP {code}" + (f": {snippet}" if snippet else "")
        if 300 <= code < 400:
            where = response.headers.get("location", "?")
            return _Outcome(error=f"HTTP {code} redirect to {where!r}; redirects are not "
                                  "followed")
        if code >= 500 or code in _RETRYABLE_STATUS:
            return _Outcome(retryable=True, error=error,
                            retry_after=_retry_after(response.headers.get("retry-after")))
        return _Outcome(error=error)


async def _read_some(response: httpx.Response) -> str:
    """Up to 1 KiB of the answer, for the record (the rest is never read)."""
    data = b""
    raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())
    async with aclosing(raw) as chunks:  # closed now, not by the GC
        async for chunk in chunks:
            data += chunk
            if len(data) >= _SNIPPET_BYTES:
                break
    return data[:_SNIPPET_BYTES].decode("utf-8", "replace").strip()[:200]


def _retry_after(value: str | None) -> float | None:
    if value is None or not value.strip().isdigit():
        return None  # the HTTP-date form is rare for webhooks; the backoff applies then
    return float(value.strip())
