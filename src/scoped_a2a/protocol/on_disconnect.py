"""The on-disconnect extension: what a caller's hang-up does to its run, as both ends read it
(no I/O).

A caller chooses per request with metadata ``onDisconnect``: ``"cancel"`` (the run ends when its
last caller hangs up) or ``"continue"`` (it finishes whoever hangs up). The card entry's
``params.default`` says what the server does when the caller does not choose.

A task this server runs detached for a reason of its own or of the caller's metadata (a
``--detach-metadata`` rule such as a CRM's ``evoai_crm_event``, ``onDisconnect: continue``,
cancel-on-disconnect switched off) carries the reason in its metadata under
:data:`DETACHED_KEY`. A caller that gives up on such a task must leave it running: it is exactly
the work that must survive its caller. (``returnImmediately`` alone sets no marker: a client may
poll on its caller's behalf and still own the run.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidParams

ON_DISCONNECT_EXTENSION_URI = "https://github.com/scoped-a2a/scoped-a2a/ext/on-disconnect/v1"
"""The on-disconnect extension: a caller chooses per request what its hang-up does."""

ON_DISCONNECT_KEY = "onDisconnect"
"""The request (or message) metadata key of the on-disconnect extension."""

ON_DISCONNECT_VALUES = ("cancel", "continue")

DETACHED_KEY = "detachedBy"
"""Task metadata key: why the server runs the task's current run detached (e.g. ``rule
evoai_crm_event=...``). Set when the task is created; a follow-up that detaches the run, or
starts a new run of the task that is not detached, changes it with the metadata of its first
``working`` status update (``{"detachedBy": reason}``, or ``null`` to remove it), which
store/snapshot.py folds into the task."""


def with_marker(metadata: Mapping[str, Any] | None, marker: str | None) -> dict[str, Any] | None:
    """A copy of ``metadata`` whose :data:`DETACHED_KEY` is ``marker`` (absent when None)."""
    out = {k: v for k, v in (metadata or {}).items() if k != DETACHED_KEY}
    if marker is not None:
        out[DETACHED_KEY] = marker
    return out or None


def on_disconnect_choice(*metadata: Mapping[str, Any] | None) -> str | None:
    """The first ``onDisconnect`` value in ``metadata`` (None when absent).

    Raises InvalidParams for a value that is not ``"cancel"`` or ``"continue"``.
    """
    for meta in metadata:
        if meta and ON_DISCONNECT_KEY in meta:
            value = meta[ON_DISCONNECT_KEY]
            if value not in ON_DISCONNECT_VALUES:
                raise InvalidParams(
                    f'metadata.{ON_DISCONNECT_KEY} must be "cancel" or "continue", '
                    f"not {value!r}"
                )
            return str(value)
    return None
