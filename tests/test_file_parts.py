"""File parts through the agent API: ``ctx.files`` reads the caller's, ``ctx.artifact(parts=)``
sends any part back (bytes with a media type and filename, or a URL), over HTTP on both
bindings."""

from __future__ import annotations

import base64

import httpx
import pytest

from scoped_a2a import A2AApp, Part, RunContext

from .helpers import rpc, served, text_message

pytestmark = pytest.mark.anyio


async def file_echo(ctx: RunContext) -> str:
    sizes = []
    for part in ctx.files:
        if part.raw is not None:
            sizes.append(f"{part.filename}:{len(part.raw)}")
            await ctx.artifact(name="copy", parts=[Part(
                raw=part.raw[::-1], media_type=part.media_type,
                filename=f"reversed-{part.filename}")])
        else:
            sizes.append(f"url:{part.url}")
    await ctx.artifact("see the link", parts=[Part(url="https://example.org/report.pdf",
                                                   media_type="application/pdf")], name="link")
    return ", ".join(sizes)


async def test_an_agent_reads_file_parts_and_answers_with_files() -> None:
    payload = bytes(range(256)) * 4
    message = text_message("here", parts=[
        {"text": "here"},
        {"raw": base64.b64encode(payload).decode(), "mediaType": "application/octet-stream",
         "filename": "blob.bin"},
        {"url": "https://example.org/in.png", "mediaType": "image/png"},
    ])
    # The card declares what the agent takes (other parts: ContentTypeNotSupported, -32005).
    modes = {"defaultInputModes": ["text/plain", "application/octet-stream", "image/*"]}
    async with served(A2AApp(file_echo, card=modes)) as url, httpx.AsyncClient() as c:
        body = await rpc(c, url, "SendMessage", {"message": message})
        task = body["result"]["task"]
        rest = (await c.get(f"{url}tasks/{task['id']}")).json()
    assert task["status"]["message"]["parts"][0]["text"] == (
        "blob.bin:1024, url:https://example.org/in.png")
    for got in (task, rest):
        copy = next(a for a in got["artifacts"] if a["name"] == "copy")["parts"][0]
        assert base64.b64decode(copy["raw"]) == payload[::-1]
        assert copy["filename"] == "reversed-blob.bin"
        assert copy["mediaType"] == "application/octet-stream"
        link = next(a for a in got["artifacts"] if a["name"] == "link")["parts"]
        assert link[0]["text"] == "see the link"
        assert link[1] == {"url": "https://example.org/report.pdf",
                           "mediaType": "application/pdf"}
