"""Who is calling: the principal an authenticator resolves from a request (no I/O).

A :class:`Principal` travels with every call (:class:`.method.Call`) into the method layer, which
decides ownership from its ``id``, and into the agent (``ctx.principal``). Without an
authenticator every caller is :data:`ANONYMOUS`, so every task belongs to everyone (the
behaviour of a server with no authentication).

An authenticator that refuses a request raises :class:`.errors.Unauthenticated` (HTTP 401) or
:class:`.errors.PermissionDenied` (HTTP 403).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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

    @property
    def anonymous(self) -> bool:
        """True for the caller of a server without authentication."""
        return self.id == ""


ANONYMOUS = Principal("")
"""Every caller when no authenticator is configured (the empty id owns every task)."""

