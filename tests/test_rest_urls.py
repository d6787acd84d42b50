"""The HTTP+JSON interface URL and the paths clients build from it, real HTTP, both backends.

The card published the HTTP+JSON URL with a trailing slash, and clients that join
``f"{url}/message:send"`` (the conformance kit, DM-SERIAL-005) asked for ``//message:send``
and got 404. The URL is published without the slash now, and paths with empty segments are
routed as their single-slash form, at the root and under a tenant.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from scoped_a2a import A2AApp, A2AClient
from scoped_a2a.agents.demo import demo_agent
from scoped_a2a.protocol.types import Task

from .helpers import served

pytestmark = pytest.mark.anyio


def _send_body(text: str) -> dict[str, Any]:
    return {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                        "parts": [{"text": text}]}}


async def test_the_rest_url_has_no_trailing_slash_and_double_slashes_route() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient(timeout=15) as http:
        card = (await http.get(url + ".well-known/agent-card.json")).json()
        urls = {i["protocolBinding"] + i["protocolVersion"]: i["url"]
                for i in card["supportedInterfaces"]}
        assert urls["HTTP+JSON1.0"] == url.rstrip("/")
        assert urls["JSONRPC1.0"] == url  # JSON-RPC is POSTed to the base URL, "/" and all
        rest = urls["HTTP+JSON1.0"]
        # The kit's join, onto the published URL and onto the old one (ending in "/").
        for base in (rest, rest + "/"):
            sent = await http.post(f"{base}/message:send", json=_send_body("hello"),
                                   headers={"A2A-Version": "1.0"})
            assert sent.status_code == 200, (base, sent.text)
            task = sent.json()["task"]
            got = await http.get(f"{base}/tasks/{task['id']}",
                                 headers={"A2A-Version": "1.0"})
            assert got.status_code == 200 and got.json()["id"] == task["id"], got.text
        # Under a tenant, and with more than two slashes.
        sent = await http.post(f"{rest}/acme//message:send", json=_send_body("hi"),
                               headers={"A2A-Version": "1.0"})
        assert sent.status_code == 200, sent.text
        sent = await http.post(f"{rest}///message:send", json=_send_body("hi"),
                               headers={"A2A-Version": "1.0"})
        assert sent.status_code == 200, sent.text
        # An unknown path is still a 404 that names it, slashes collapsed or not.
        missing = await http.post(f"{rest}//nothing:here", json={})
        assert missing.status_code == 404 and "/nothing:here" in missing.text


@pytest.mark.parametrize("slash", ["/", ""])
async def test_our_client_with_a_card_url_with_and_without_a_slash(slash: str) -> None:
    """Our client given the base URL with and without its slash: the card, then REST calls
    on the card's (slash-less) HTTP+JSON URL."""
    app = A2AApp(demo_agent, preferred_binding="HTTP+JSON")
    async with served(app) as url, A2AClient(url.rstrip("/") + slash) as client:
        assert await client.binding() == "rest"
        task = await client.send("hello")
        assert isinstance(task, Task)
        assert (await client.get_task(task.id)).id == task.id
