"""Who is calling: the principal an authenticator resolves from a request (no I/O).

A :class:`Principal` travels with every call (:class:`.method.Call`) into the method layer, which
decides ownership from its ``id``, and into the agent (``ctx.principal``). Without an
authenticator every caller is :data:`ANONYMOUS`, so every task belongs to everyone (the
behaviour of a server with no authentication).

An authenticator that refuses a request raises :class:`.errors.Unauthenticated` (HTTP 401) or
:class:`.errors.PermissionDenied` (HTTP 403).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidParams, PermissionDenied

TENANT_SEPARATOR = "\x1f"
"""Between a principal id and a tenant in a task's owner key (neither may contain it)."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: a stable ``id`` (tasks are owned by it) and its ``claims``.

    ``claims`` are what the scheme learnt (a JWT's payload, an API key's name); agents may read
    them, the server only compares ``id``.
    """

    id: str
    claims: Mapping[str, Any] = field(default_factory=dict)
    scheme: str = ""
    """The security scheme that accepted the credential (a key of the card's securitySchemes)."""
    tenants: frozenset[str] | None = None
    """The tenants this principal may use (None: any, and requests without a tenant)."""

    @property
    def anonymous(self) -> bool:
        """True for the caller of a server without authentication."""
        return self.id == ""


ANONYMOUS = Principal("")
"""Every caller when no authenticator is configured (the empty id owns every task)."""



def owner_key(principal: Principal, tenant: str | None) -> str:
    """Who owns the tasks a request may see: the principal, within the request's ``tenant``.

    The 1.0 ``tenant`` field partitions tasks the way principals do: a task created in one
    tenant is not found from another. Raises PermissionDenied when the principal is limited to
    other tenants, InvalidParams for a tenant that cannot be one.
    """
    if tenant:
        check_tenant(tenant)
    if principal.tenants is not None and (tenant or "") not in principal.tenants:
        raise PermissionDenied(f"tenant {tenant or '(none)'!r} is not one this caller may use")
    if not tenant:
        return principal.id
    return f"{principal.id}{TENANT_SEPARATOR}{tenant}"


def check_tenant(tenant: str) -> None:
    """Refuse a tenant with a control character (C0, DEL or C1: NUL, LF, ``\\x1f``...).

    The one rule for every binding: JSON-RPC's ``params.tenant`` and the HTTP+JSON path's
    ``/{tenant}`` prefix both reach :func:`owner_key`. Such characters cannot be told apart in a
    log or a URL, and ``\\x1f`` separates the principal from the tenant in an owner key.
    Raises InvalidParams naming the first offending character and its position.
    """
    found = _CONTROL.search(tenant)  # one C-level scan: this runs on every call with a tenant
    if found is not None:
        raise InvalidParams(
            f"tenant must not contain control characters: U+{ord(found.group()):04X} at "
            f"position {found.start()}; use printable characters (for example letters, "
            "digits, '-')")


def principal_of_owner(owner: str) -> Principal:
    """The principal (id only, no claims) behind a stored owner key."""
    return Principal(owner.partition(TENANT_SEPARATOR)[0]) if owner else ANONYMOUS
