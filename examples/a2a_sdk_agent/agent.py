"""An a2a-sdk ``AgentExecutor`` that streams a model's answer, served unchanged on scoped-a2a.

The executor is written for a2a-sdk 1.x the way its docs write one (``TaskUpdater``, artifact
chunks); it talks to any OpenAI-compatible chat-completions endpoint with httpx:

    pip install 'scoped-a2a[a2a-sdk]'
    export MODEL_URL=http://127.0.0.1:11434/v1   # the endpoint's base URL (default: OpenAI's)
    export MODEL_NAME=llama3.1                   # default: gpt-4o-mini
    export OPENAI_API_KEY=...                    # if the endpoint wants one
    python -m scoped_a2a serve --backend asyncio --agent examples.a2a_sdk_agent.agent:executor

Offline, with no model and no key: serve the fake endpoint of ``scoped_a2a.testing.fake_llm``
(it answers "(fake model) you said: ...") in another terminal, and point ``MODEL_URL`` at it::

    python -m scoped_a2a.testing.fake_llm --port 8001
    MODEL_URL=http://127.0.0.1:8001/v1 MODEL_NAME=fake python -m scoped_a2a serve \\
        --backend asyncio --agent examples.a2a_sdk_agent.agent:executor

``serve`` recognises the executor and this module's ``agent_card``. On a2a-sdk's own server a
caller that hangs up leaves the model call running; here an interactive run is cancelled, the
executor's ``cancel`` is called and the model's HTTP request is closed, while a fire-and-forget
send (``returnImmediately``, or a ``--detach-metadata`` rule) finishes whoever hangs up.
"""

from __future__ import annotations

import json
import os

import httpx
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_URL = "https://api.openai.com/v1"


class ChatExecutor(AgentExecutor):
    """Streams the model's reply to the user's text as chunks of one ``reply`` artifact."""

    def __init__(self, model_url: str | None = None, model: str | None = None) -> None:
        self.model_url = (model_url or os.environ.get("MODEL_URL") or DEFAULT_URL).rstrip("/")
        self.model = model or os.environ.get("MODEL_NAME") or DEFAULT_MODEL

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        request = {"model": self.model, "stream": True, "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": context.get_user_input()}]}
        headers = {"authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'not-set')}"}
        first = True
        async with httpx.AsyncClient(timeout=60) as http, http.stream(
                "POST", f"{self.model_url}/chat/completions", json=request,
                headers=headers) as response:
            if response.status_code != 200:
                await updater.failed(updater.new_agent_message(
                    [new_text_part(f"the model answered HTTP {response.status_code}")]))
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                delta = json.loads(line[5:])["choices"][0]["delta"].get("content")
                if delta:
                    await updater.add_artifact([new_text_part(delta)], artifact_id="reply",
                                               name="reply", append=not first)
                    first = False
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


executor = ChatExecutor()

agent_card = {
    "name": "Chat (a2a-sdk executor)",
    "description": "Answers briefly, streaming the model's reply.",
    "skills": [{"id": "chat", "name": "Chat", "description": "Answers a question.",
                "tags": ["chat"]}],
}
