"""Run an ASGI app on one of the servers the benchmarks compare, the way scoped-a2a is run.

hypercorn gets the same settings ``scoped_a2a.serve`` uses (backlog 1024, keep-alive 75 s, no
access log); uvicorn its defaults with logging at warning. SIGTERM ends the process.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from typing import Any

SERVERS = ("hypercorn-asyncio", "hypercorn-trio", "uvicorn")


def arguments(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server", choices=SERVERS, default="uvicorn")
    return p


def run(app: Any, server: str, port: int, *, started: Callable[[], object] | None = None
        ) -> None:
    """Serve ``app`` on 127.0.0.1:``port`` until the process is terminated.

    ``started`` (uvicorn only) is called once the server has started (its lifespan too)."""
    logging.basicConfig(level=logging.WARNING)
    if server == "uvicorn":
        import uvicorn

        class Server(uvicorn.Server):
            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets)
                if started is not None:
                    started()

        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                access_log=False)
        Server(config).run()
        return
    from hypercorn.config import Config

    hconfig = Config()
    hconfig.bind = [f"127.0.0.1:{port}"]
    hconfig.backlog = 1024
    hconfig.keep_alive_timeout = 75
    hconfig.accesslog = None
    hconfig.errorlog = logging.getLogger("hypercorn.error")
    if server == "hypercorn-trio":
        import hypercorn.trio
        import trio

        trio.run(hypercorn.trio.serve, app, hconfig)
    else:
        import hypercorn.asyncio

        asyncio.run(hypercorn.asyncio.serve(app, hconfig))
