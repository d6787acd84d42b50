"""The SSRF guard: which webhook URLs a server may POST to, checked when a config is set and again
before every delivery attempt.

A webhook URL comes from the caller, so without a guard any caller could make the server POST to
its own loopback services, the cloud metadata endpoint (169.254.169.254) or the private network.
The rule: the URL is ``http``/``https`` with a host and no credentials, and **every** address the
host resolves to is public, unless the operator allowed the host name, or an address or network
it resolves into (``--allow-webhook-host``). Every address is checked, not just the first, so a
name that answers with one public and one private address is refused.

The check hands back the address it approved, and the delivery connects to exactly that address
(:mod:`.delivery` pins it), so DNS cannot answer differently between the check and the connection
(DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Collection
from dataclasses import dataclass

import anyio
import httpx

from ..protocol.errors import InvalidParams
from ..protocol.types import TaskPushNotificationConfig
from ..timeouts import fail_after
from .settings import Resolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
MAX_URL_LENGTH = 2048


class WebhookRefused(Exception):
    """The webhook URL may not be used; ``str(exc)`` says why, for the caller and the log.

    ``retryable`` is True when the cause may pass (the host did not resolve this time).
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class Target:
    """A checked webhook: its URL, the host as written, and the address to connect to."""

    url: httpx.URL
    host: str
    address: str


class Allowance:
    """The operator's exceptions: host names, and addresses or networks (CIDR)."""

    def __init__(self, entries: Collection[str]) -> None:
        self.names: frozenset[str] = frozenset()
        self.networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
        names, networks = set(), []
        for raw in entries:
            entry = raw.strip().lower().rstrip(".").strip("[]")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                names.add(entry)
        self.names, self.networks = frozenset(names), tuple(networks)

    def allows_name(self, host: str) -> bool:
        return host in self.names

    def allows_address(self, ip: IPAddress) -> bool:
        return any(ip in net for net in self.networks)


def refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address (None when it is)."""
    if isinstance(ip, ipaddress.IPv6Address):
        # Addresses that embed an IPv4 address reach that address: judge the embedded one.
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return refusal(embedded)
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_private:
        return "a private address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "a non-public address"
    return None


def parse_url(raw: str) -> httpx.URL:
    """Parse and check the form of a webhook URL; raises WebhookRefused saying what is wrong."""
    if not raw or len(raw) > MAX_URL_LENGTH:
        raise WebhookRefused(f"the webhook URL must be 1 to {MAX_URL_LENGTH} characters long")
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError) as exc:
        raise WebhookRefused(f"the webhook URL {raw!r} is not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https"):
        raise WebhookRefused(
            f"the webhook URL must use http or https, not {url.scheme or 'no scheme'!r}")
    if not url.host:
        raise WebhookRefused(f"the webhook URL {raw!r} has no host")
    if url.userinfo:
        raise WebhookRefused(
            "the webhook URL must not carry credentials; use the config's authentication")
    return url


async def default_resolver(host: str, port: int) -> list[str]:
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def check_url(
    raw: str, allowance: Allowance, resolver: Resolver | None, *, resolve_within: float
) -> Target:
    """Resolve the URL's host and check every address; return where to connect.

    Raises WebhookRefused (the form is wrong, the host does not resolve within
    ``resolve_within`` seconds, or
    an address is not public and not allowed). Cancellation propagates.
    """
    url = parse_url(raw)
    host = url.host.lower().rstrip(".")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with fail_after(resolve_within):
            addresses = await (resolver or default_resolver)(host, port)
    except TimeoutError:
        raise WebhookRefused(
            f"the webhook host {host!r} did not resolve within {resolve_within:g}s",
            retryable=True) from None
    except OSError as exc:
        raise WebhookRefused(f"the webhook host {host!r} does not resolve: {exc}",
                             retryable=True) from None
    if not addresses:
        raise WebhookRefused(f"the webhook host {host!r} resolves to no address")
    if allowance.allows_name(host):
        return Target(url, host, addresses[0])
    for text in dict.fromkeys(addresses):  # unique, in order
        try:
            ip = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            raise WebhookRefused(
                f"the webhook host {host!r} resolved to {text!r}, not an IP address") from None
        why = refusal(ip)
        if why is not None and not allowance.allows_address(ip):
            shown = host if host == str(ip) else f"{host} resolves to {ip}, which"
            raise WebhookRefused(
                f"webhook URL refused: {shown} is {why}; an operator can allow it with "
                f"--allow-webhook-host {host} (PushSettings(allow_hosts=[...]) in the API)"
            )
    return Target(url, host, addresses[0])


MAX_FIELD = 4096
"""Characters a config's id, token or credentials may have at most."""


def check_fields(config: TaskPushNotificationConfig) -> None:
    """Raise InvalidParams (-32602) saying what is wrong with a config's id, token or
    authentication (control characters, too long, a scheme that is not one word)."""
    for name, value in (("id", config.id), ("token", config.token)):
        if value is not None and (len(value) > MAX_FIELD or _has_control(value)):
            raise InvalidParams(f"invalid push notification config: {name} must be at most "
                                f"{MAX_FIELD} characters, without control characters")
    auth = config.authentication
    if auth is not None:
        if not auth.scheme or any(c.isspace() for c in auth.scheme) or len(auth.scheme) > 64:
            raise InvalidParams("invalid push notification config: authentication.scheme "
                                "must be one word such as 'Bearer'")
        if auth.credentials is not None and (
            len(auth.credentials) > MAX_FIELD or _has_control(auth.credentials)
        ):
            raise InvalidParams("invalid push notification config: authentication."
                                "credentials must be at most 4096 characters, without "
                                "control characters")


def _has_control(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)
