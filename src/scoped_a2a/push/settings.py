"""``PushSettings``: how an app delivers push notifications (one immutable object, no I/O).

Set from the API (``A2AApp(..., push=PushSettings(...))``) or the CLI (``--allow-webhook-host``,
``--push-bearer-token``, ``--push-signing-secret``). The defaults are safe for a public server:
webhooks on loopback, private, link-local, multicast or reserved addresses are refused unless an
operator names the host (or network) in ``allow_hosts``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Literal

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> [ip, ...]``: how webhook host names are resolved (tests stub it)."""


@dataclass(frozen=True, slots=True)
class PushSettings:
    """Push-notification delivery settings of one app.

    :param enabled: False answers every push method (and a send carrying a config) with -32003
        and the card says ``pushNotifications: false``.
    :param allow_hosts: host names, IP addresses or networks (CIDR) whose non-public addresses
        are allowed anyway, e.g. ``["127.0.0.1"]`` for a receiver on this machine, or
        ``["hooks.internal", "10.8.0.0/16"]``. A name is matched as written in the URL; an
        address or network is matched against what the URL's host resolves to.
    :param bearer_token: sent as ``Authorization: Bearer ...`` on deliveries whose config has no
        ``authentication`` of its own.
    :param signing_secret: when set, each delivery is signed with HMAC-SHA256 in the Standard
        Webhooks headers ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``
        (a ``whsec_``-prefixed secret is base64-decoded, as that standard does).
    :param deliver: ``"states"`` delivers every state change after the config was set;
        ``"terminal"`` only the final one.
    :param connect_timeout: seconds to resolve and connect to a webhook.
    :param read_timeout: seconds to wait for the webhook's answer (and between its bytes).
    :param attempt_timeout: seconds one attempt may take in all (a receiver that trickles its
        answer cannot hold a delivery longer).
    :param first_backoff: seconds before the first retry; doubled per retry, with jitter.
    :param max_backoff: the cap on the wait between retries.
    :param retry_for: seconds from a delivery's first attempt after which it is recorded as
        failed; a retry is made only if its whole ``attempt_timeout`` fits in this bound.
    :param shutdown_grace: seconds pending deliveries get on shutdown after the runs have ended
        (None: the app's ``grace``); the rest are recorded as undelivered.
    :param max_configs_per_task: more configs on one task are refused (bounds the fan-out).
    :param max_records: delivery records kept for the status method (oldest tasks' dropped).
    :param resolver: how to resolve webhook hosts (default: ``anyio.getaddrinfo``).
    """

    enabled: bool = True
    allow_hosts: Collection[str] = ()
    bearer_token: str | None = None
    signing_secret: str | bytes | None = None
    deliver: Literal["states", "terminal"] = "states"
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    attempt_timeout: float = 15.0
    first_backoff: float = 0.5
    max_backoff: float = 60.0
    retry_for: float = 900.0
    shutdown_grace: float | None = None
    max_configs_per_task: int = 16
    max_records: int = 10_000
    resolver: Resolver | None = None

    def __post_init__(self) -> None:
        if self.deliver not in ("states", "terminal"):
            raise ValueError("deliver must be 'states' or 'terminal'")
        for name in ("connect_timeout", "read_timeout", "attempt_timeout", "first_backoff",
                     "max_backoff"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.retry_for < 0 or (self.shutdown_grace is not None and self.shutdown_grace < 0):
            raise ValueError("retry_for and shutdown_grace must not be negative")
        if self.max_configs_per_task < 1 or self.max_records < 1:
            raise ValueError("max_configs_per_task and max_records must be positive")
        if isinstance(self.allow_hosts, str):
            raise ValueError("allow_hosts is a collection of hosts, not one string")
