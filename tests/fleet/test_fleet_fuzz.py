"""Fuzzed follow-ups through the replica that does not hold the run (hypothesis), on Redis and
on PostgreSQL: a run parked on replica A (input-required) gets answers, cancels and
subscriptions through replica B whose every field may be missing, of the wrong type or odd.

Each call is answered (a result, or a 4xx / JSON-RPC error with no internals: never a 5xx, a
hang or a traceback in either replica's log); an answer that was refused leaves the parked run
waiting; one that was taken resumes it exactly once.
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..helpers import text_message
from .conftest import Fleet
from .test_fleet_hostile import ALICE, INTERNALS

MISSING = object()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6)


def _field(valid: Any) -> st.SearchStrategy[Any]:
    """A field: its valid value (most often), absent, or any JSON value."""
    return st.one_of(st.just(valid), st.just(valid), st.just(MISSING), json_values)


def _value(valid: Any) -> st.SearchStrategy[Any]:
    """A part's field (absent is the dictionary's choice): its valid value or any JSON."""
    return st.one_of(st.just(valid), json_values)


parts = st.lists(st.fixed_dictionaries({}, optional={
    "text": _value("an answer"), "data": json_values, "url": _value("https://example/x"),
    "raw": _value("aGk="), "mediaType": _value("text/plain"), "filename": _value("x.txt"),
    "metadata": json_values}), max_size=3)
messages = st.fixed_dictionaries({
    "messageId": _field("m"), "role": _field("ROLE_USER"),
    "parts": st.one_of(_field([{"text": "an answer"}]), parts),
    "metadata": _field({}), "extensions": _field([]), "referenceTaskIds": _field([]),
    "keep_task": st.booleans(), "keep_context": st.booleans()})
calls = st.tuples(st.sampled_from(["SendMessage", "SendStreamingMessage", "CancelTask",
                                   "SubscribeToTask"]),
                  messages, _field({"historyLength": 1}), _field({}))


def _url(proc: Any) -> str:
    deadline = time.monotonic() + 60
    while (m := re.search(r"serving on (http://\S+/)", proc.text())) is None:
        assert proc.popen.poll() is None and time.monotonic() < deadline, proc.text()[-3000:]
        time.sleep(0.05)
    return m.group(1)


@pytest.mark.one_python("3.13")  # suite time: one Python is enough
@pytest.mark.pairs
def test_fuzzed_follow_ups_through_the_other_replica(fleet: Fleet) -> None:
    keys = fleet.tmp / "keys.txt"
    keys.write_text("alice:alice-secret\n")
    a = fleet.serve("--api-keys", str(keys))
    b = fleet.serve("--api-keys", str(keys))
    url_a, url_b = _url(a), _url(b)
    with httpx.Client(timeout=30) as client:

        def call(url: str, method: str, params: Any) -> httpx.Response:
            return client.post(url, headers=ALICE, json={
                "jsonrpc": "2.0", "id": 1, "method": method, "params": params})

        def park() -> dict[str, Any]:
            r = call(url_a, "SendMessage", {"message": text_message("ask")})
            task: dict[str, Any] = r.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", r.text[:300]
            return task

        current = [park()]

        @settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(calls)
        def probe(drawn: tuple[str, dict[str, Any], Any, Any]) -> None:
            method, fields, configuration, metadata = drawn
            task = current[0]
            message = {k: v for k, v in fields.items()
                       if v is not MISSING and k not in ("keep_task", "keep_context")}
            if fields["keep_task"]:
                message["taskId"] = task["id"]
            if fields["keep_context"]:
                message["contextId"] = task["contextId"]
            if method in ("CancelTask", "SubscribeToTask"):
                params: Any = {"id": task["id"] if fields["keep_task"] else message.get(
                    "messageId", "x")}
                if metadata is not MISSING:
                    params["metadata"] = metadata
            else:
                params = {"message": message}
                if configuration is not MISSING:
                    params["configuration"] = configuration
                if metadata is not MISSING:
                    params["metadata"] = metadata
            if method == "SubscribeToTask":
                # A subscription to a waiting run stays open: read what it says first.
                with client.stream("POST", url_b, headers=ALICE, json={
                        "jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                        timeout=30) as resp:
                    assert resp.status_code < 500, resp.status_code
                    first = next(resp.iter_lines(), "")
                    assert not INTERNALS.search(first), first[:300]
                return
            r = call(url_b, method, params)
            assert r.status_code < 500, (r.status_code, r.text[:300], params)
            assert not INTERNALS.search(r.text), (r.text[:300], params)
            took = '"result"' in r.text and task["id"] in r.text
            if took:  # resumed, or cancelled: the next probes get a new parked run
                current[0] = park()

        probe()
        # The run every call since its parking was refused on still waits.
        got = call(url_a, "GetTask", {"id": current[0]["id"]}).json()["result"]
        assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", got
        for proc in (a, b):
            assert "Traceback" not in proc.text(), proc.text()[-3000:]
        ends = re.findall(r"run end task=(\w+) outcome=(\w+)", a.text())
        per_task: dict[str, int] = {}
        for task_id, _ in ends:
            per_task[task_id] = per_task.get(task_id, 0) + 1
        assert all(n == 1 for n in per_task.values()), per_task  # no run ended twice
