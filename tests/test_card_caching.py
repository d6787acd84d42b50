"""The agent card over HTTP: a strong ETag and Last-Modified, 304 on a matching conditional GET,
200 with the card otherwise (issue 23: the spec's SHOULD and MAY)."""

from __future__ import annotations

from email.utils import formatdate, parsedate_to_datetime

import httpx
import pytest

from scoped_a2a import A2AApp
from scoped_a2a.agents.demo import demo_agent

from .helpers import served

pytestmark = pytest.mark.anyio
CARD = ".well-known/agent-card.json"


async def test_the_card_has_validators_and_answers_304_to_a_client_that_holds_it() -> None:
    async with served(A2AApp(demo_agent)) as url, httpx.AsyncClient() as c:
        first = await c.get(url + CARD)
        assert first.status_code == 200
        etag, modified = first.headers["etag"], first.headers["last-modified"]
        assert etag.startswith('"') and etag.endswith('"')
        parsedate_to_datetime(modified)  # a valid HTTP-date
        assert (await c.get(url + CARD)).headers["etag"] == etag  # stable

        cached = await c.get(url + CARD, headers={"if-none-match": etag})
        assert cached.status_code == 304 and cached.content == b""
        assert cached.headers["etag"] == etag
        listed = await c.get(url + CARD, headers={"if-none-match": f'"other", W/{etag}'})
        assert listed.status_code == 304
        other = await c.get(url + CARD, headers={"if-none-match": '"not-this-one"'})
        assert other.status_code == 200 and other.json()["name"]
        # If-None-Match wins over If-Modified-Since when both are sent.
        both = await c.get(url + CARD, headers={"if-none-match": '"x"',
                                                 "if-modified-since": modified})
        assert both.status_code == 200

        since = await c.get(url + CARD, headers={"if-modified-since": modified})
        assert since.status_code == 304
        old = await c.get(url + CARD, headers={"if-modified-since": formatdate(0, usegmt=True)})
        assert old.status_code == 200
        garbage = await c.get(url + CARD, headers={"if-modified-since": "yesterday-ish"})
        assert garbage.status_code == 200
