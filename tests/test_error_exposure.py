"""What a remote caller learns when an agent or the server raises, over real HTTP.

Default: the exception's type and an error id that is also in the log line with the traceback;
an ``AgentError``'s message is sent as is; ``expose_errors`` / ``serve --expose-errors`` sends the
full text.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest

from scoped_a2a import A2AApp, AgentError, MemoryTaskStore, RunContext
from scoped_a2a.protocol.types import Task

from .helpers import rpc, served, text_message

SECRET = "postgres://admin:hunter2@db.internal/crm"
ERROR_ID = re.compile(r"error id ([0-9a-f]{8})")


async def leaky_agent(ctx: RunContext) -> str:
    if ctx.text == "tell":
        raise AgentError("the CRM rejected the lead: duplicate email")
    raise RuntimeError(f"cannot connect to {SECRET}")


class BrokenStore(MemoryTaskStore):
    """A store whose reads fail with a message that must not reach the caller."""

    async def get(self, task_id: str) -> tuple[Task, int]:
        raise RuntimeError(f"lost the connection to {SECRET}")

    async def owner_of(self, task_id: str) -> str:  # the first read of a task's methods
        raise RuntimeError(f"lost the connection to {SECRET}")


async def _failed_status(url: str, text: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as client:
        body = await rpc(client, url, "SendMessage", {"message": text_message(text)})
    status: dict[str, Any] = body["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    return status


def _logged_with_id(caplog: pytest.LogCaptureFixture, error_id: str) -> logging.LogRecord:
    records = [r for r in caplog.records if error_id in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    return records[0]


@pytest.mark.anyio
async def test_an_agents_exception_text_stays_in_the_log(
        anyio_backend: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoped_a2a")
    async with served(A2AApp(leaky_agent, grace=1.0)) as url:
        status = await _failed_status(url, "go")
    text = status["message"]["parts"][0]["text"]
    assert "hunter2" not in text
    match = ERROR_ID.search(text)
    assert text.startswith("RuntimeError (error id ") and match, text
    assert status["message"]["metadata"] == {"reason": "error", "errorId": match.group(1)}
    record = _logged_with_id(caplog, match.group(1))
    assert record.exc_info is not None and "hunter2" in str(record.exc_info[1])


@pytest.mark.anyio
async def test_an_agent_error_is_sent_as_is(anyio_backend: str) -> None:
    async with served(A2AApp(leaky_agent, grace=1.0)) as url:
        status = await _failed_status(url, "tell")
    assert status["message"]["parts"][0]["text"] == "the CRM rejected the lead: duplicate email"


@pytest.mark.anyio
async def test_expose_errors_sends_the_full_text(anyio_backend: str) -> None:
    async with served(A2AApp(leaky_agent, grace=1.0, expose_errors=True)) as url:
        status = await _failed_status(url, "go")
    assert status["message"]["parts"][0]["text"] == f"RuntimeError: cannot connect to {SECRET}"


@pytest.mark.anyio
async def test_an_internal_error_answers_with_an_id_not_the_text(
        anyio_backend: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scoped_a2a")
    app = A2AApp(leaky_agent, grace=1.0, store=BrokenStore())
    async with served(app) as url, httpx.AsyncClient(timeout=10) as client:
        body = await rpc(client, url, "GetTask", {"id": "t1"})
    message = body["error"]["message"]
    assert body["error"]["code"] == -32603
    assert "hunter2" not in message
    match = ERROR_ID.search(message)
    assert message.startswith("internal error: RuntimeError (error id ") and match, message
    record = _logged_with_id(caplog, match.group(1))
    assert record.exc_info is not None and "hunter2" in str(record.exc_info[1])

    exposed = A2AApp(leaky_agent, grace=1.0, store=BrokenStore(), expose_errors=True)
    async with served(exposed) as url, httpx.AsyncClient(timeout=10) as client:
        body = await rpc(client, url, "GetTask", {"id": "t1"})
    assert body["error"]["message"] == (
        f"internal error: RuntimeError: lost the connection to {SECRET}")


@pytest.mark.parametrize("flags", [[], ["--expose-errors"]])
def test_serve_expose_errors_flag(flags: list[str]) -> None:
    from .test_cli import start, stop

    proc, url, log = start("--agent", "tests.test_error_exposure:leaky_agent", *flags)
    try:
        with httpx.Client(timeout=10) as client:
            r = client.post(url, headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": text_message("go")}})
        text = r.json()["result"]["task"]["status"]["message"]["parts"][0]["text"]
    finally:
        stop(proc, log)
    if flags:
        assert text == f"RuntimeError: cannot connect to {SECRET}"
    else:
        error_id = ERROR_ID.search(text)
        assert error_id and "hunter2" not in text, text
        assert f"error id {error_id.group(1)}" in log.text()  # the operator can find it
