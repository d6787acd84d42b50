"""The official a2a-sdk's gRPC server (``grpc.aio``) with tests/sdk_agent.py's executor, for the
client's gRPC interop tests: ``python tests/sdk_grpc_agent.py --port N``.

gRPC listens on a port of its own; ``--port`` serves the agent card over HTTP (uvicorn), and the
card lists the gRPC interface only (``host:port``, no scheme), as a gRPC-only agent's would;
``GET /journal`` there tells when the executor was cancelled (tests/sdk_agent.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import grpc
import uvicorn
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.server.routes import create_agent_card_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2_grpc
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette

from sdk_agent import JOURNAL_ROUTE, Executor  # type: ignore[import-not-found]  # a script


async def main(port: int) -> None:
    server = grpc.aio.server()
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    card = AgentCard(
        name="sdk-grpc-agent", description="a2a-sdk gRPC interop peer", version="1.0.0",
        supported_interfaces=[AgentInterface(url=f"127.0.0.1:{grpc_port}",
                                             protocol_binding="GRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="echoes", tags=["test"])],
    )
    handler = DefaultRequestHandler(agent_executor=Executor(), task_store=InMemoryTaskStore(),
                                    agent_card=card)
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    await server.start()
    routes = [JOURNAL_ROUTE, *create_agent_card_routes(card)]
    config = uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=port,
                            log_level="warning", access_log=False)
    try:
        await uvicorn.Server(config).serve()
    finally:
        await server.stop(1)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(main(parser.parse_args().port))
