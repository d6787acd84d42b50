"""A Google ADK agent served by from_adk reads the caller's file parts: its card accepts the
media types the adapter forwards, and the bytes reach the model inline (a URL as file data)."""

from __future__ import annotations

import base64

import httpx
import pytest
from google.adk.agents import LlmAgent

from scoped_a2a import A2AApp
from scoped_a2a.adapters.adk import from_adk

from .adk_models import ScriptedLlm
from .helpers import rpc, served, text_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def test_file_parts_reach_the_model_and_the_card_accepts_them() -> None:
    model = ScriptedLlm(script=[["I see a picture."]])
    app = A2AApp(from_adk(LlmAgent(name="viewer", model=model, instruction="Describe.")))
    image = b"\x89PNG\r\n\x1a\nfake"
    message = text_message("what is this?", parts=[
        {"text": "what is this?"},
        {"raw": base64.b64encode(image).decode(), "mediaType": "image/png"},
        {"url": "https://files.example/report.pdf", "mediaType": "application/pdf"},
    ])
    async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
        card = (await c.get(url + ".well-known/agent-card.json")).json()
        body = await rpc(c, url, "SendMessage", {"message": message})
        refused = await rpc(c, url, "SendMessage", {"message": text_message("x", parts=[
            {"raw": base64.b64encode(b"MZ").decode(), "mediaType": "application/x-msdownload"}])})
    assert "image/*" in card["defaultInputModes"]
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    user_turn = model.probe.requests[0].contents[-1]
    inline = [p.inline_data for p in user_turn.parts if p.inline_data is not None]
    linked = [p.file_data for p in user_turn.parts if p.file_data is not None]
    assert inline and inline[0].data == image and inline[0].mime_type == "image/png"
    assert linked and linked[0].file_uri == "https://files.example/report.pdf"
    assert refused["error"]["code"] == -32005  # not a type the card accepts
