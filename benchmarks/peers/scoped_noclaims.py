"""scoped-a2a's ``serve`` command with message claims switched off: the memory store's claim
methods are the ``TaskStore`` base class's no-ops (every send is new, as in a store that does not
deduplicate). The "claims off" rows of the resend scenario; arguments are those of
``scoped-a2a serve``. The fingerprint of each message is still taken (the method layer takes it
before asking the store), so "off" leaves out the claim itself, not the whole check."""

from __future__ import annotations

import sys

from scoped_a2a.cli import main
from scoped_a2a.store.base import TaskStore
from scoped_a2a.store.memory import MemoryTaskStore

CLAIM_METHODS = ("claim_message", "reclaim_message", "confirm_message", "release_message")


def claims_off() -> None:
    """Give ``MemoryTaskStore`` the base class's claim methods (which keep no claims)."""
    for name in CLAIM_METHODS:
        setattr(MemoryTaskStore, name, getattr(TaskStore, name))


if __name__ == "__main__":
    claims_off()
    sys.exit(main(["serve", *sys.argv[1:]]))
