"""Which runs are detached: one small, immutable object, set from the API or the CLI (no I/O).

A detached run belongs to the server nursery and finishes whoever hangs up. A run is detached
when the caller asked not to wait, when a metadata rule matches the message's or the request's
metadata (the CRM's fire-and-forget system events), or when cancel-on-disconnect is off. Every
other run is interactive: it ends when the last caller waiting on it has gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol.on_disconnect import (  # re-exported: the server's names for them
    ON_DISCONNECT_EXTENSION_URI as ON_DISCONNECT_EXTENSION_URI,
)
from ..protocol.on_disconnect import (
    ON_DISCONNECT_KEY as ON_DISCONNECT_KEY,
)
from ..protocol.on_disconnect import (
    ON_DISCONNECT_VALUES as ON_DISCONNECT_VALUES,
)
from ..protocol.on_disconnect import (
    on_disconnect_choice,
)

DEFAULT_INPUT_TIMEOUT = 600.0
"""Seconds a run waits in ``ctx.ask``: long enough for a person to answer a chat question."""

DEFAULT_MAX_PARKED_RUNS = 1000
"""Runs that may wait in ``ctx.ask`` at once. Each holds its task (messages up to the body
limit) and its stack for up to the input timeout, with nobody waiting on it; a thousand
conversations waiting on people at once is a busy agent, not a small one."""


@dataclass(frozen=True, slots=True)
class RunPolicy:
    """How runs relate to their callers.

    ``detach_metadata`` maps a metadata key to the values that detach a run, e.g.
    ``{"evoai_crm_event": {"inactivity_action", "new_lead"}}``; an empty value set matches any
    value of that key.

    ``input_timeout`` bounds how long a run waits in ``ctx.ask`` (seconds; then the task fails
    with reason ``input-timeout``). ``max_parked_runs`` caps how many runs may wait in
    ``ctx.ask`` at once: when it is reached, a run that asks fails at once with reason
    ``parked-limit`` (new sends are still accepted: a send cannot know whether its run will
    ask, and most never do). Answering or cancelling a parked run frees its slot.
    """

    detach_metadata: Mapping[str, frozenset[str]] = field(default_factory=dict)
    cancel_on_disconnect: bool = True
    input_timeout: float = DEFAULT_INPUT_TIMEOUT
    max_parked_runs: int = DEFAULT_MAX_PARKED_RUNS

    def __post_init__(self) -> None:
        if not self.input_timeout > 0:
            raise ValueError(f"input_timeout must be positive seconds, not {self.input_timeout!r}")
        if self.max_parked_runs < 0:
            raise ValueError(
                f"max_parked_runs must be 0 or more, not {self.max_parked_runs!r} (0: no run "
                "may ask for input)"
            )

    @classmethod
    def from_rules(
        cls, rules: Iterable[str] = (), *, cancel_on_disconnect: bool = True,
        input_timeout: float = DEFAULT_INPUT_TIMEOUT,
        max_parked_runs: int = DEFAULT_MAX_PARKED_RUNS,
    ) -> RunPolicy:
        """Build from CLI-style rules ``KEY=V1,V2`` (``KEY`` alone matches any value)."""
        parsed: dict[str, frozenset[str]] = {}
        for rule in rules:
            key, _, values = rule.partition("=")
            key = key.strip()
            if not key:
                raise ValueError(f"detach rule {rule!r} has no key (expected KEY=V1,V2)")
            vals = frozenset(v.strip() for v in values.split(",") if v.strip())
            parsed[key] = parsed.get(key, frozenset()) | vals
        return cls(parsed, cancel_on_disconnect, input_timeout, max_parked_runs)

    def detach_reason(
        self,
        *,
        return_immediately: bool,
        message_metadata: Mapping[str, Any] | None,
        request_metadata: Mapping[str, Any] | None,
    ) -> str | None:
        """Why a new run is detached, or None when it is interactive.

        In order: the caller does not wait (``returnImmediately``); a server rule matches the
        metadata (events that must finish whatever their caller asks); the caller's
        ``onDisconnect`` choice (:data:`ON_DISCONNECT_KEY`, the on-disconnect extension);
        the server's default. Raises InvalidParams for an ``onDisconnect`` value other than
        ``"cancel"`` or ``"continue"``.
        """
        if return_immediately:
            return "return-immediately"
        for meta in (message_metadata, request_metadata):
            if not meta:
                continue
            for key, values in self.detach_metadata.items():
                if key in meta and (not values or str(meta[key]) in values):
                    return f"rule {key}={meta[key]}"
        choice = on_disconnect_choice(request_metadata, message_metadata)
        if choice is not None:
            return "on-disconnect continue" if choice == "continue" else None
        if not self.cancel_on_disconnect:
            return "cancel-on-disconnect off"
        return None
