"""Message history of pydantic-ai agents, kept per conversation (A2A context id).

A follow-up message in the same context sees the earlier turns: before a run the adapter loads
the context's history and passes it as ``message_history``; after a run that ended well it
appends the run's new messages as one turn. A run that failed or was cancelled appends nothing,
so the next message in that context continues from the last turn that completed.

Histories are keyed by ``(owner, context id)``: a context id is chosen by the client, so two
callers that pick the same one must not read each other's conversation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

HistoryKey = tuple[str, str]
"""``(principal id, context id)``: whose conversation, and which."""


class HistoryStore(Protocol):
    """Where conversations live. Implement both methods to keep them elsewhere (a database).

    Messages are pydantic-ai ``ModelMessage`` objects; to store them as JSON use pydantic-ai's
    ``ModelMessagesTypeAdapter`` (``dump_json`` / ``validate_json``). Both methods run inside the
    run's cancel scope: a cancelled run abandons them (so ``append`` must leave the store whole
    if it is cancelled half-way), and an error they raise fails the run.
    """

    async def load(self, key: HistoryKey) -> Sequence[Any]:
        """The context's messages so far, oldest first (empty for a new context)."""
        ...

    async def append(self, key: HistoryKey, messages: Sequence[Any]) -> None:
        """Add one completed run's new messages to the context, as one turn."""
        ...


class MemoryHistory:
    """Histories in this process's memory, bounded twice.

    ``max_contexts``: conversations kept; the one used least recently is forgotten first.
    ``max_turns``: turns kept per conversation; past it the oldest turns after the first are
    dropped. The first turn stays because it carries the system prompt (pydantic-ai sends
    ``system_prompt=`` only on a conversation's first request), and whole turns are dropped so
    that a tool call is never kept without its result. One turn's size is not bounded: a run
    that returns a huge tool result keeps it until the turn is dropped.

    Nothing here awaits, so a cancellation cannot land half-way through a method.
    """

    def __init__(self, *, max_contexts: int = 1000, max_turns: int = 50) -> None:
        if max_contexts < 1 or max_turns < 2:
            raise ValueError("MemoryHistory needs max_contexts >= 1 and max_turns >= 2")
        self.max_contexts = max_contexts
        self.max_turns = max_turns
        self._turns: OrderedDict[HistoryKey, list[list[Any]]] = OrderedDict()

    def __len__(self) -> int:
        """How many conversations are kept."""
        return len(self._turns)

    async def load(self, key: HistoryKey) -> list[Any]:
        turns = self._turns.get(key)
        if turns is None:
            return []
        self._turns.move_to_end(key)
        return [message for turn in turns for message in turn]

    async def append(self, key: HistoryKey, messages: Sequence[Any]) -> None:
        if not messages:
            return
        turns = self._turns.setdefault(key, [])
        self._turns.move_to_end(key)
        turns.append(list(messages))
        if len(turns) > self.max_turns:
            del turns[1]  # the oldest turn after the first (see the class docstring)
        while len(self._turns) > self.max_contexts:
            self._turns.popitem(last=False)
