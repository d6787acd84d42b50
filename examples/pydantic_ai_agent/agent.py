"""A pydantic-ai agent with one tool, served on scoped-a2a, talking to any OpenAI-compatible
endpoint (OpenAI, a vLLM or Ollama server, a gateway).

    pip install 'scoped-a2a[pydantic-ai]'
    export MODEL_URL=http://127.0.0.1:11434/v1   # the endpoint's base URL (default: OpenAI's)
    export MODEL_NAME=llama3.1                   # default: gpt-4o-mini
    export OPENAI_API_KEY=...                    # if the endpoint wants one
    python -m scoped_a2a serve --backend asyncio --agent examples.pydantic_ai_agent.agent:agent

or run this file, with flags instead of the environment:

    python examples/pydantic_ai_agent/agent.py --model-url http://127.0.0.1:11434/v1 --port 8000

Offline, with no model and no key: serve the fake endpoint of ``scoped_a2a.testing.fake_llm``
(it answers "(fake model) you said: ..."; ``--tool get_order_status --args
'{"order_id": "A-1001"}'`` has it call the tool first) in another terminal, and point
``MODEL_URL`` at it::

    python -m scoped_a2a.testing.fake_llm --port 8001
    MODEL_URL=http://127.0.0.1:8001/v1 MODEL_NAME=fake python -m scoped_a2a serve \\
        --backend asyncio --agent examples.pydantic_ai_agent.agent:agent

The agent is plain pydantic-ai: nothing in ``assistant`` knows about A2A. ``agent`` is that
agent adapted (``from_pydantic_ai``): the model's streamed text becomes artifact chunks, the
tool calls show on the task's live trajectory, a follow-up in the same context continues the
conversation, and a caller who hangs up (or a CancelTask) aborts the model's HTTP request.
"""

from __future__ import annotations

import argparse
import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from scoped_a2a.adapters.pydantic_ai import from_pydantic_ai

DEFAULT_MODEL = "gpt-4o-mini"

ORDERS: dict[str, dict[str, str | None]] = {
    "A-1001": {"status": "shipped", "carrier": "DHL", "eta": "2 days"},
    "A-1002": {"status": "packing", "carrier": None, "eta": "5 days"},
}
"""A stand-in for the order system the tool would call."""


def build(model_url: str | None = None, model_name: str | None = None) -> Agent[None, str]:
    """The pydantic-ai agent, its model at ``model_url`` (env ``MODEL_URL``; absent: OpenAI)."""
    provider = OpenAIProvider(
        base_url=model_url or os.environ.get("MODEL_URL") or None,
        # Local endpoints take any key; OpenAI answers 401 (the task fails) without a real one.
        api_key=os.environ.get("OPENAI_API_KEY") or "not-set",
    )
    model = OpenAIChatModel(model_name or os.environ.get("MODEL_NAME") or DEFAULT_MODEL,
                            provider=provider)
    assistant = Agent(
        model,
        name="order-assistant",
        instructions="You answer questions about customer orders. Look orders up with the "
        "get_order_status tool; never guess a status.",
    )

    @assistant.tool_plain
    def get_order_status(order_id: str) -> dict[str, str | None]:
        """The status, carrier and expected delivery of an order, by its id (like A-1001)."""
        order = ORDERS.get(order_id.strip().upper())
        return order if order is not None else {"status": "unknown order"}

    return assistant


assistant = build()
agent = from_pydantic_ai(assistant)


def main() -> None:
    import anyio

    from scoped_a2a import A2AApp, serve

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-url", help="OpenAI-compatible base URL (env MODEL_URL)")
    parser.add_argument("--model", help=f"model name (env MODEL_NAME, default {DEFAULT_MODEL})")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    app = A2AApp(from_pydantic_ai(build(args.model_url, args.model)))
    # serve() drains on SIGINT/SIGTERM: a second signal stops at once.
    anyio.run(lambda: serve(app, host=args.host, port=args.port), backend="asyncio")


if __name__ == "__main__":
    main()
