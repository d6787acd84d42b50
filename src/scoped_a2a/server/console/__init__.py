"""The live console (``serve --console``): every run in flight, who holds it, why it ended.

A page at ``/console`` and its JSON + SSE API under ``/console/api`` (docs/console.md). Off
by default: ``A2AApp`` imports this package only when given ``console=ConsoleSettings(...)``.
"""

from __future__ import annotations

from .access import ConsoleSettings
from .routes import Console

__all__ = ["Console", "ConsoleSettings"]
