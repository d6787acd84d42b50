"""The a2a-sdk peer's own ``BenchExecutor``, unchanged, for scoped-a2a's ``serve --agent``.

    python -m scoped_a2a serve --backend asyncio \\
        --agent benchmarks.peers.sdk_executor_scoped:executor

``serve`` recognises an a2a-sdk ``AgentExecutor`` and adapts it (``from_executor``), so the
adapters scenario runs the very executor the a2a-sdk server runs (imported, not copied).
"""

from __future__ import annotations

from benchmarks.peers.sdk_server import BenchExecutor

executor = BenchExecutor()
